//! Convolutions and pooling for the whole sub-batch at once.

use super::*;

impl CudaDevice {
    /// A convolution for the whole sub-batch: its cuDNN plan (`dnn.rs`) on the cuDNN path,
    /// else im2col (or depthwise) over every image, one strided-batched GEMM, the channel
    /// epilogue.
    pub(super) fn conv(&mut self, model: &Model, i: usize) -> Result<()> {
        if self.mem.nodes.get(i).is_some_and(|g| g.conv.is_some()) {
            return self.conv_cudnn(i);
        }
        let node = &model.nodes[i];
        let Op::Conv2d {
            kernel: (kh, kw),
            stride,
            padding,
            groups,
            act,
            ..
        } = &node.op
        else {
            return Err(Error::Internal(format!("conv on node '{}'", node.name)));
        };
        let (c, h, w) = node.in_chw();
        let (ho, wo) = node.out_hw();
        let p = ho * wo;
        let co = node.out.feat[0];
        let g = *groups;
        let (cg, cog) = (c / g, co / g);
        let kk = cg * kh * kw;
        let depthwise = node.op.is_depthwise(c);
        let pointwise = (*kh, *kw, *stride, *padding) == (1, 1, 1, 0);
        let ints = [
            c as i32,
            h as i32,
            w as i32,
            *kh as i32,
            *kw as i32,
            *stride as i32,
            *padding as i32,
            ho as i32,
            wo as i32,
        ];
        let ak = act_code(*act);
        // the whole sub-batch at once: images one after another in A (c·h·w apart),
        // their columns in `cols` (kk·p apart), outputs in C (co·p apart)
        let nimg = self.gather()?;
        let nimg_i = nimg as i32;
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs {
            stream,
            funcs,
            blas,
            ..
        } = lib;
        let Memory {
            nodes,
            scratch,
            s16,
            ..
        } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        // the input images in scratch A or the producer's rows, the outputs in scratch C or
        // the node's own rows
        let Operands {
            x,
            mut y,
            cols,
            w: wts,
            ..
        } = Self::operands(nodes, sc, staged, i, nimg * c * h * w, nimg * co * p)?;
        let wv = wts.w.as_ref().ok_or_else(|| missing("conv weights"))?;
        if depthwise {
            let f = funcs.get("depthwise").ok_or_else(|| missing("depthwise"))?;
            let mut b = stream.launch_builder(f);
            b.arg(&x).arg(wv).arg(&mut y);
            for v in &ints {
                b.arg(v);
            }
            b.arg(&nimg_i);
            // SAFETY: nimg images in x, y holds nimg·co·p outputs.
            unsafe { b.launch(elems(nimg * c * p)) }.map_err(cuda_err)?;
        } else {
            let x_img = (c * h * w) as i64;
            for gi in 0..g {
                if !pointwise {
                    let f = funcs.get("im2col_kp").ok_or_else(|| missing("im2col_kp"))?;
                    let (c0, cgi) = ((gi * cg) as i32, cg as i32);
                    let mut b = stream.launch_builder(f);
                    b.arg(&x)
                        .arg(&mut *cols)
                        .arg(&ints[1])
                        .arg(&ints[2])
                        .arg(&c0)
                        .arg(&cgi);
                    for v in &ints[3..] {
                        b.arg(v);
                    }
                    b.arg(&nimg_i).arg(&x_img);
                    // SAFETY: cols holds max_batch·kk·p elements (prepare sized it).
                    unsafe { b.launch(elems(nimg * kk * p)) }.map_err(cuda_err)?;
                }
                // per image: out[cog × p] (channel-major) = Wgᵀ[cog × kk] · cols[kk × p]
                let range = gi * kk * cog..(gi + 1) * kk * cog;
                let wop = wts.gemm_operand(range, "conv weights")?;
                let mut cv = y.slice_mut(gi * cog * p..nimg * co * p);
                let (act_op, act_stride) = if pointwise {
                    (Operand::F(x.slice(gi * cg * p..nimg * c * p)), c * p)
                } else {
                    (Operand::F(cols.slice(..nimg * kk * p)), kk * p)
                };
                let units = Units {
                    s16: s16.as_mut(),
                    blas,
                    stream,
                    funcs,
                };
                Self::gemm_p(
                    units,
                    (cog, p, kk),
                    (wop, true, cog),
                    (act_op, false, p),
                    (&mut cv, p),
                    Strides {
                        count: nimg,
                        a: 0,
                        b: act_stride,
                        c: co * p,
                    },
                )?;
            }
        }
        channel_epilogue(
            stream,
            funcs,
            &mut y,
            (wts.scale.as_ref(), wts.shift.as_ref()),
            (co, p, nimg),
            ak,
        )?;
        self.scatter(i, Buf::C)?;
        Ok(())
    }

    /// A convolution for the whole sub-batch through its cuDNN plan.
    fn conv_cudnn(&mut self, i: usize) -> Result<()> {
        let nimg = self.gather()?;
        // the raw cuDNN calls need the context current on this thread (cudarc's own calls
        // make it so themselves)
        self.lib.ctx.bind_to_thread().map_err(cuda_err)?;
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs {
            stream,
            funcs,
            dnn: cudnn,
            ..
        } = lib;
        let Memory {
            nodes,
            scratch,
            s16,
            ..
        } = mem;
        let Host { staged, .. } = host;
        let (c, h, w, co, p) = {
            let plan = nodes[i]
                .conv
                .as_ref()
                .ok_or_else(|| missing("cuDNN plan"))?;
            let ((c, h, w), (co, ho, wo)) = (plan.chw, plan.out_chw);
            (c, h, w, co, ho * wo)
        };
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let Operands { x, mut y, conv, .. } =
            Self::operands(nodes, sc, staged, i, nimg * c * h * w, nimg * co * p)?;
        let plan = conv.ok_or_else(|| missing("cuDNN plan"))?;
        let cudnn = cudnn.as_mut().ok_or_else(|| missing("cuDNN handle"))?;
        let io = dnn::ConvIo {
            x: &x,
            y: &mut y,
            n: nimg,
            s16: s16.as_mut(),
        };
        dnn::convolve(cudnn, plan, stream, funcs, io)?;
        self.scatter(i, Buf::C)?;
        Ok(())
    }

    /// Pooling for the whole sub-batch.
    pub(super) fn pool(&mut self, model: &Model, i: usize) -> Result<()> {
        let node = &model.nodes[i];
        let Op::Pool {
            kind,
            kernel,
            stride,
            padding,
        } = &node.op
        else {
            return Err(Error::Internal(format!("pool on node '{}'", node.name)));
        };
        let (c, h, w) = node.in_chw();
        let (ho, wo) = node.out_hw();
        let (k, s, pd, kd) = match kind {
            PoolKind::GlobalAvg => (h.max(w), 1, 0, 1),
            PoolKind::Max => (*kernel, *stride, *padding, 0),
            PoolKind::Avg => (*kernel, *stride, *padding, 1),
        };
        let nimg = self.gather()?;
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs { stream, funcs, .. } = lib;
        let Memory { nodes, scratch, .. } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let Operands { x, mut y, .. } =
            Self::operands(nodes, sc, staged, i, nimg * c * h * w, nimg * c * ho * wo)?;
        let f = funcs.get("pool2d").ok_or_else(|| missing("pool2d"))?;
        let v = [
            c as i32,
            h as i32,
            w as i32,
            k as i32,
            s as i32,
            pd as i32,
            ho as i32,
            wo as i32,
            kd,
            nimg as i32,
        ];
        let mut b = stream.launch_builder(f);
        b.arg(&x).arg(&mut y);
        for x in &v {
            b.arg(x);
        }
        // SAFETY: nimg images in, nimg·c·ho·wo out.
        unsafe { b.launch(elems(nimg * c * ho * wo)) }.map_err(cuda_err)?;
        self.scatter(i, Buf::C)?;
        Ok(())
    }
}

/// Per-channel scale and shift (a folded batch norm; either may be absent) and the activation,
/// in place over `nimg` images of `co` channels × `p` positions.
pub(super) fn channel_epilogue(
    stream: &CudaStream,
    funcs: &HashMap<String, CudaFunction>,
    c: &mut CudaViewMut<f32>,
    (scale, shift): (Option<&CudaSlice<f32>>, Option<&CudaSlice<f32>>),
    (co, p, nimg): (usize, usize, usize),
    act: i32,
) -> Result<()> {
    let f = funcs
        .get("channel_epilogue")
        .ok_or_else(|| missing("channel_epilogue"))?;
    let null = 0u64;
    let (co_i, p_i, nimg_i) = (co as i32, p as i32, nimg as i32);
    let mut b = stream.launch_builder(f);
    b.arg(c);
    match scale {
        Some(s) => b.arg(s),
        None => b.arg(&null),
    };
    match shift {
        Some(s) => b.arg(s),
        None => b.arg(&null),
    };
    b.arg(&co_i).arg(&p_i).arg(&act).arg(&nimg_i);
    // SAFETY: C holds nimg·co·p outputs.
    unsafe { b.launch(elems(nimg * co * p)) }.map_err(cuda_err)?;
    Ok(())
}
