//! Convolutions through cuDNN (`--conv cudnn`, the default where libcudnn loads): per
//! convolution node, the filter in cuDNN's KCRS order with the folded batch norm's scale
//! multiplied in, a convolution descriptor (groups, math type) and, per sub-batch size from 1 to
//! the maximum batch, the input and output tensor descriptors and the algorithm cuDNN's
//! heuristics rank first among those whose workspace fits [`WORKSPACE_CAP`] — all made at
//! [`Device::prepare`], with one workspace for the largest, so that serving only calls cuDNN.
//!
//! f32 (FMA math: no TF32, so that `verify` keeps the f32 tolerance) and TF32 (`--precision
//! tf32`: cuDNN's default math): a ReLU convolution is one `cudnnConvolutionBiasActivationForward`
//! (convolution, shift and ReLU fused); any other is `cudnnConvolutionForward` and the channel
//! epilogue kernel for its shift and activation. f16: the images go to f16 scratch, cuDNN
//! convolves on tensor cores (f16 in and out, f32 accumulation), and one kernel
//! (`channel_epilogue_h`) converts the output back with its shift and activation. Tensors are
//! NCHW, the device's layout (an image's channels one after another), which cuDNN takes as is.
//!
//! The descriptors are cuDNN's raw handles, each owned by a small guard that destroys it, since
//! choosing among ranked algorithms needs the handles that cudarc's safe wrappers keep private.

use super::*;
use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys as ds;
use cudarc::driver::DevicePtrMut;

/// The most workspace one convolution's algorithm may take; cuDNN's heuristics rank
/// algorithms, and the first whose workspace fits is taken.
pub(super) const WORKSPACE_CAP: usize = 256 << 20;

/// How the CUDA device computes convolutions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPath {
    /// cuDNN (descriptors and algorithm chosen at prepare).
    Cudnn,
    /// im2col and a strided-batched cuBLAS GEMM, then the channel epilogue.
    Im2col,
}

impl ConvPath {
    /// The name `--conv` takes for it.
    pub fn name(self) -> &'static str {
        match self {
            ConvPath::Cudnn => "cudnn",
            ConvPath::Im2col => "im2col",
        }
    }
}

/// What `--conv` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvChoice {
    /// cuDNN where libcudnn loads, else im2col (with a notice).
    Auto,
    /// This path; cuDNN missing is an error.
    Path(ConvPath),
}

impl ConvChoice {
    /// Parses `auto`, `cudnn` or `im2col`.
    pub fn parse(s: &str) -> Result<ConvChoice> {
        match s {
            "auto" => Ok(ConvChoice::Auto),
            "cudnn" => Ok(ConvChoice::Path(ConvPath::Cudnn)),
            "im2col" => Ok(ConvChoice::Path(ConvPath::Im2col)),
            o => Err(Error::invalid(
                "--conv",
                format!("unknown convolution path '{o}' (auto, cudnn, im2col)"),
            )),
        }
    }
}

/// A cuDNN call that failed, with what it was doing.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {status:?}")]
pub(crate) struct DnnError {
    what: String,
    status: ds::cudnnStatus_t,
}

fn fail(what: impl Into<String>) -> impl FnOnce(dnn::CudnnError) -> Error {
    let what = what.into();
    move |e| Error::DeviceFailed {
        device: "cuda".into(),
        source: Box::new(DnnError { what, status: e.0 }),
    }
}

guard!(Handle, ds::cudnnHandle_t, dnn::destroy_handle);
guard!(
    Tensor,
    ds::cudnnTensorDescriptor_t,
    dnn::destroy_tensor_descriptor
);
guard!(
    Filter,
    ds::cudnnFilterDescriptor_t,
    dnn::destroy_filter_descriptor
);
guard!(
    ConvDesc,
    ds::cudnnConvolutionDescriptor_t,
    dnn::destroy_convolution_descriptor
);
guard!(ActDesc, ds::cudnnActivationDescriptor_t, destroy_activation);

/// `cudnnDestroyActivationDescriptor` (cudarc's result module has no wrapper for it).
///
/// # Safety
/// `d` was made by `cudnnCreateActivationDescriptor` and is destroyed once.
unsafe fn destroy_activation(d: ds::cudnnActivationDescriptor_t) -> Result<(), dnn::CudnnError> {
    ds::cudnnDestroyActivationDescriptor(d).result()
}

/// The cuDNN handle of a device, on its stream, with the ReLU the fused calls apply.
pub(super) struct Dnn {
    handle: Handle,
    relu: ActDesc,
    /// cuDNN's version (e.g. 91300 for 9.13.0).
    pub(super) version: usize,
    /// The workspace of the largest algorithm chosen at prepare.
    workspace: Option<CudaSlice<u8>>,
}

impl Dnn {
    /// A handle on `stream` (whose context is current on this thread).
    pub(super) fn new(stream: &Arc<CudaStream>) -> Result<Dnn> {
        let handle = Handle(dnn::create_handle().map_err(fail("cudnnCreate"))?);
        // SAFETY: a live handle and the device's own stream.
        unsafe { dnn::set_stream(handle.0, stream.cu_stream() as ds::cudaStream_t) }
            .map_err(fail("cudnnSetStream"))?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one descriptor handle.
        unsafe { ds::cudnnCreateActivationDescriptor(&mut raw) }
            .result()
            .map_err(fail("cudnnCreateActivationDescriptor"))?;
        let relu = ActDesc(raw);
        // SAFETY: a live descriptor; ReLU ignores the coefficient.
        unsafe {
            dnn::set_activation_descriptor(
                relu.0,
                ds::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU,
                ds::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
                0.0,
            )
        }
        .map_err(fail("cudnnSetActivationDescriptor"))?;
        Ok(Dnn {
            handle,
            relu,
            version: dnn::get_version(),
            workspace: None,
        })
    }

    /// `major.minor.patch` of the loaded cuDNN.
    pub(super) fn version_string(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100)
    }

    /// Drops the workspace (before a re-prepare allocates the next).
    pub(super) fn clear(&mut self) {
        self.workspace = None;
    }

    /// Allocates the workspace for every plan made since the last [`Dnn::clear`].
    pub(super) fn allocate_workspace(
        &mut self,
        stream: &Arc<CudaStream>,
        bytes: usize,
    ) -> Result<()> {
        self.workspace = Some(stream.alloc_zeros::<u8>(bytes.max(1)).map_err(cuda_err)?);
        Ok(())
    }
}

/// The data a plan's tensors hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Data {
    F32,
    F16,
}

impl Data {
    fn dtype(self) -> ds::cudnnDataType_t {
        match self {
            Data::F32 => ds::cudnnDataType_t::CUDNN_DATA_FLOAT,
            Data::F16 => ds::cudnnDataType_t::CUDNN_DATA_HALF,
        }
    }
}

/// A convolution's filter on the device.
enum Kcrs {
    F(CudaSlice<f32>),
    H(CudaSlice<half::f16>),
}

/// One sub-batch size's descriptors and algorithm.
struct BatchPlan {
    x: Tensor,
    y: Tensor,
    algo: ds::cudnnConvolutionFwdAlgo_t,
    workspace: usize,
}

/// A convolution node's cuDNN plan (see the module's paragraph).
pub(super) struct ConvPlan {
    data: Data,
    filter: Filter,
    conv: ConvDesc,
    weights: Kcrs,
    /// The shift (a folded batch norm's, or the bias), when the layer has one.
    shift: Option<CudaSlice<f32>>,
    /// The fused call's bias: its descriptor and values (the shift, or zeros).
    fused: Option<(Tensor, CudaSlice<f32>)>,
    /// The activation's code (kernels/common.cuh), applied by the fused call when it is a ReLU
    /// at f32, else by the epilogue kernel.
    act: i32,
    /// Per sub-batch size, from one image.
    batches: Vec<BatchPlan>,
    /// Images in and out: channels, height, width.
    pub(super) chw: (usize, usize, usize),
    pub(super) out_chw: (usize, usize, usize),
}

/// What [`ConvPlan::new`] needs to know of a node.
pub(super) struct ConvSpec<'a> {
    pub(super) name: &'a str,
    pub(super) chw: (usize, usize, usize),
    pub(super) out_chw: (usize, usize, usize),
    pub(super) kernel: (usize, usize),
    pub(super) stride: usize,
    pub(super) padding: usize,
    pub(super) groups: usize,
    pub(super) act: Act,
    /// The generated weights: `w` as the im2col path stores them (per group, `[c/g·kh·kw][co/g]`),
    /// the per-channel `scale` and `shift` (either may be empty).
    pub(super) weights: &'a Weights,
}

/// `v` as a cuDNN dimension.
fn dim(v: usize, what: &str, node: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::Internal(format!(
            "cuda device: {what} {v} of '{node}' exceeds cuDNN's int"
        ))
    })
}

impl ConvPlan {
    /// The plan for one convolution at sub-batches of 1 to `max_batch` images, in `precision`.
    pub(super) fn new(
        dnn: &Dnn,
        stream: &Arc<CudaStream>,
        spec: &ConvSpec,
        max_batch: usize,
        precision: Precision,
    ) -> Result<ConvPlan> {
        let ConvSpec {
            name,
            chw: (c, h, w),
            out_chw: (co, ho, wo),
            kernel: (kh, kw),
            stride,
            padding,
            groups,
            act,
            weights,
        } = *spec;
        let at = |what: &str| format!("{what} for convolution '{name}'");
        let data = match precision {
            Precision::F32 | Precision::Tf32 => Data::F32,
            Precision::F16 => Data::F16,
        };
        let d = |v: usize, what: &str| dim(v, what, name);
        let (cg, cog) = (c / groups, co / groups);
        // the filter: KCRS with the scale multiplied in
        let kk = cg * kh * kw;
        let mut kcrs = vec![0.0f32; co * kk];
        for g in 0..groups {
            for j in 0..cog {
                let o = g * cog + j;
                let s = weights.scale.get(o).copied().unwrap_or(1.0);
                for r in 0..kk {
                    kcrs[o * kk + r] = weights.w[(g * kk + r) * cog + j] * s;
                }
            }
        }
        let filter = Filter(dnn::create_filter_descriptor().map_err(fail(at("filter")))?);
        // SAFETY: a live descriptor.
        unsafe {
            dnn::set_filter4d_descriptor(
                filter.0,
                data.dtype(),
                ds::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                [
                    d(co, "channels")?,
                    d(cg, "channels")?,
                    d(kh, "kernel")?,
                    d(kw, "kernel")?,
                ],
            )
        }
        .map_err(fail(at("filter")))?;
        let conv = ConvDesc(dnn::create_convolution_descriptor().map_err(fail(at("conv")))?);
        let math = match precision {
            Precision::F32 => ds::cudnnMathType_t::CUDNN_FMA_MATH,
            Precision::Tf32 => ds::cudnnMathType_t::CUDNN_DEFAULT_MATH,
            Precision::F16 => ds::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
        };
        let (p, s) = (d(padding, "padding")?, d(stride, "stride")?);
        let g = d(groups, "groups")?;
        // SAFETY: a live descriptor; f32 accumulation at every precision.
        let set = || unsafe {
            dnn::set_convolution2d_descriptor(
                conv.0,
                p,
                p,
                s,
                s,
                1,
                1,
                ds::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                ds::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )?;
            dnn::set_convolution_group_count(conv.0, g)?;
            dnn::set_convolution_math_type(conv.0, math)
        };
        set().map_err(fail(at("convolution descriptor")))?;
        let weights_dev = match data {
            Data::F32 => Kcrs::F(stream.clone_htod(&kcrs).map_err(cuda_err)?),
            Data::F16 => {
                let h: Vec<half::f16> = kcrs.iter().map(|&x| half::f16::from_f32(x)).collect();
                Kcrs::H(stream.clone_htod(&h).map_err(cuda_err)?)
            }
        };
        let shift = if weights.shift.is_empty() {
            None
        } else {
            Some(stream.clone_htod(&weights.shift).map_err(cuda_err)?)
        };
        let fused = if data == Data::F32 && act == Act::Relu {
            let t = Tensor(dnn::create_tensor_descriptor().map_err(fail(at("bias")))?);
            // SAFETY: a live descriptor.
            unsafe {
                dnn::set_tensor4d_descriptor(
                    t.0,
                    ds::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    data.dtype(),
                    [1, d(co, "channels")?, 1, 1],
                )
            }
            .map_err(fail(at("bias")))?;
            let values = if weights.shift.is_empty() {
                stream.alloc_zeros::<f32>(co).map_err(cuda_err)?
            } else {
                stream.clone_htod(&weights.shift).map_err(cuda_err)?
            };
            Some((t, values))
        } else {
            None
        };
        let mut plan = ConvPlan {
            data,
            filter,
            conv,
            weights: weights_dev,
            shift,
            fused,
            act: act_code(act),
            batches: Vec::with_capacity(max_batch),
            chw: (c, h, w),
            out_chw: (co, ho, wo),
        };
        for n in 1..=max_batch {
            let bp = plan.batch(dnn, name, n)?;
            plan.batches.push(bp);
        }
        Ok(plan)
    }

    /// The descriptors and algorithm for `n` images.
    fn batch(&self, dnn: &Dnn, name: &str, n: usize) -> Result<BatchPlan> {
        let at = |what: &str| format!("{what} for convolution '{name}' at {n} images");
        let d = |v: usize, what: &str| dim(v, what, name);
        let tensor = |(c, h, w): (usize, usize, usize)| -> Result<Tensor> {
            let t = Tensor(dnn::create_tensor_descriptor().map_err(fail(at("tensor")))?);
            // SAFETY: a live descriptor.
            unsafe {
                dnn::set_tensor4d_descriptor(
                    t.0,
                    ds::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    self.data.dtype(),
                    [
                        d(n, "images")?,
                        d(c, "channels")?,
                        d(h, "height")?,
                        d(w, "width")?,
                    ],
                )
            }
            .map_err(fail(at("tensor")))?;
            Ok(t)
        };
        let (x, y) = (tensor(self.chw)?, tensor(self.out_chw)?);
        // cuDNN's output shape must be the model's
        let mut dims = [0i32; 4];
        // SAFETY: live descriptors; writes four ints.
        unsafe {
            ds::cudnnGetConvolution2dForwardOutputDim(
                self.conv.0,
                x.0,
                self.filter.0,
                &mut dims[0],
                &mut dims[1],
                &mut dims[2],
                &mut dims[3],
            )
        }
        .result()
        .map_err(fail(at("output shape")))?;
        let (co, ho, wo) = self.out_chw;
        if dims != [n as i32, co as i32, ho as i32, wo as i32] {
            return Err(Error::Internal(format!(
                "cuDNN computes {dims:?} for convolution '{name}' at {n} images, the model {:?}",
                [n, co, ho, wo]
            )));
        }
        const RANKED: usize = 8;
        // SAFETY: a zeroed perf struct is valid (every enum has a zero variant); cuDNN writes
        // at most RANKED of them.
        let mut perf: [ds::cudnnConvolutionFwdAlgoPerf_t; RANKED] = unsafe { std::mem::zeroed() };
        let mut count = 0;
        // SAFETY: live handle and descriptors; room for RANKED results.
        unsafe {
            dnn::get_convolution_forward_algorithm(
                dnn.handle.0,
                x.0,
                self.filter.0,
                self.conv.0,
                y.0,
                RANKED as i32,
                &mut count,
                perf.as_mut_ptr(),
            )
        }
        .map_err(fail(at("cudnnGetConvolutionForwardAlgorithm_v7")))?;
        let ranked = &perf[..(count.max(0) as usize).min(RANKED)];
        for p in ranked {
            if p.status != ds::cudnnStatus_t::CUDNN_STATUS_SUCCESS || p.memory > WORKSPACE_CAP {
                continue;
            }
            // SAFETY: live handle and descriptors.
            let ws = unsafe {
                dnn::get_convolution_forward_workspace_size(
                    dnn.handle.0,
                    x.0,
                    self.filter.0,
                    self.conv.0,
                    y.0,
                    p.algo,
                )
            }
            .map_err(fail(at("cudnnGetConvolutionForwardWorkspaceSize")))?;
            if ws > WORKSPACE_CAP {
                continue;
            }
            return Ok(BatchPlan {
                x,
                y,
                algo: p.algo,
                workspace: ws.max(p.memory),
            });
        }
        Err(Error::DeviceFailed {
            device: "cuda".into(),
            source: format!(
                "cuDNN offers no algorithm for convolution '{name}' at {n} images within a {} MiB workspace ({} ranked: {:?})",
                WORKSPACE_CAP >> 20,
                ranked.len(),
                ranked.iter().map(|p| (p.algo, p.status, p.memory)).collect::<Vec<_>>()
            )
            .into(),
        })
    }

    /// The largest workspace any of its sub-batch sizes needs.
    pub(super) fn workspace(&self) -> usize {
        self.batches.iter().map(|b| b.workspace).max().unwrap_or(0)
    }

    /// The algorithm chosen for `n` images (for reports and tests).
    pub(super) fn algorithm(&self, n: usize) -> Option<String> {
        self.batches
            .get(n.checked_sub(1)?)
            .map(|b| format!("{:?}", b.algo))
    }
}

/// What [`convolve`] reads and writes: `x` and `y` the sub-batch's `n` images (f32, as the
/// device stores them), `s16` the f16 scratch at f16 precision.
pub(super) struct ConvIo<'a, 'b> {
    pub(super) x: &'b CudaView<'a, f32>,
    pub(super) y: &'b mut CudaViewMut<'a, f32>,
    pub(super) n: usize,
    pub(super) s16: Option<&'b mut Scratch16>,
}

/// Runs `plan` on `io.n` images: the cuDNN call and, where it does not fuse them, the shift and
/// activation (see the module's paragraph).
pub(super) fn convolve(
    dnn: &mut Dnn,
    plan: &ConvPlan,
    stream: &Arc<CudaStream>,
    funcs: &HashMap<String, CudaFunction>,
    io: ConvIo,
) -> Result<()> {
    let ConvIo { x, y, n, s16 } = io;
    let bp = plan
        .batches
        .get(n.wrapping_sub(1))
        .ok_or_else(|| missing("cuDNN plan for this sub-batch size"))?;
    let Dnn {
        handle,
        relu,
        workspace,
        ..
    } = dnn;
    let ws = workspace
        .as_mut()
        .ok_or_else(|| missing("cuDNN workspace"))?;
    if ws.len() < bp.workspace {
        return Err(Error::Internal(format!(
            "cuda device: cuDNN workspace of {} bytes, the algorithm needs {}",
            ws.len(),
            bp.workspace
        )));
    }
    let (c, h, w) = plan.chw;
    let (co, ho, wo) = plan.out_chw;
    let what = |call: &str| format!("{call} ({n} images, {:?})", bp.algo);
    let (ws_ptr, _gw) = ws.device_ptr_mut(stream);
    let ws_ptr = if bp.workspace == 0 {
        std::ptr::null_mut()
    } else {
        ws_ptr as *mut std::ffi::c_void
    };
    match (&plan.weights, s16) {
        (Kcrs::F(wt), _) => {
            let (one, zero) = (1.0f32, 0.0f32);
            let (xp, _gx) = x.device_ptr(stream);
            let (wp, _gwt) = wt.device_ptr(stream);
            let (yp, gy) = y.device_ptr_mut(stream);
            match &plan.fused {
                Some((bias_desc, bias)) => {
                    let (bp_ptr, _gb) = bias.device_ptr(stream);
                    // SAFETY: descriptors made for n images of these shapes; y is also z, read
                    // with alpha2 = 0; the workspace holds what the algorithm asked for.
                    unsafe {
                        dnn::convolution_bias_activation_forward(
                            handle.0,
                            (&one as *const f32).cast(),
                            bp.x.0,
                            xp as *const std::ffi::c_void,
                            plan.filter.0,
                            wp as *const std::ffi::c_void,
                            plan.conv.0,
                            bp.algo,
                            ws_ptr,
                            bp.workspace,
                            (&zero as *const f32).cast(),
                            bp.y.0,
                            yp as *const std::ffi::c_void,
                            bias_desc.0,
                            bp_ptr as *const std::ffi::c_void,
                            relu.0,
                            bp.y.0,
                            yp as *mut std::ffi::c_void,
                        )
                    }
                    .map_err(fail(what("cudnnConvolutionBiasActivationForward")))?;
                    return Ok(());
                }
                None => {
                    // SAFETY: as above.
                    unsafe {
                        dnn::convolution_forward(
                            handle.0,
                            (&one as *const f32).cast(),
                            bp.x.0,
                            xp as *const std::ffi::c_void,
                            plan.filter.0,
                            wp as *const std::ffi::c_void,
                            plan.conv.0,
                            bp.algo,
                            ws_ptr,
                            bp.workspace,
                            (&zero as *const f32).cast(),
                            bp.y.0,
                            yp as *mut std::ffi::c_void,
                        )
                    }
                    .map_err(fail(what("cudnnConvolutionForward")))?;
                }
            }
            drop(gy);
            if plan.shift.is_some() || plan.act != 0 {
                conv::channel_epilogue(
                    stream,
                    funcs,
                    y,
                    (None, plan.shift.as_ref()),
                    (co, ho * wo, n),
                    plan.act,
                )?;
            }
            Ok(())
        }
        (Kcrs::H(wt), Some(s16)) => {
            let (in_len, out_len) = (n * c * h * w, n * co * ho * wo);
            gemm::to_f16(stream, funcs, x, &mut s16.a, in_len)?;
            let (one, zero) = (1.0f32, 0.0f32);
            {
                let x16 = s16.a.slice(..in_len);
                let mut y16 = s16.c.slice_mut(..out_len);
                let (xp, _gx) = x16.device_ptr(stream);
                let (wp, _gwt) = wt.device_ptr(stream);
                let (yp, _gy) = y16.device_ptr_mut(stream);
                // SAFETY: as above, in f16 scratch sized at prepare for the largest gather and
                // output.
                unsafe {
                    dnn::convolution_forward(
                        handle.0,
                        (&one as *const f32).cast(),
                        bp.x.0,
                        xp as *const std::ffi::c_void,
                        plan.filter.0,
                        wp as *const std::ffi::c_void,
                        plan.conv.0,
                        bp.algo,
                        ws_ptr,
                        bp.workspace,
                        (&zero as *const f32).cast(),
                        bp.y.0,
                        yp as *mut std::ffi::c_void,
                    )
                }
                .map_err(fail(what("cudnnConvolutionForward")))?;
            }
            let f = funcs
                .get("channel_epilogue_h")
                .ok_or_else(|| missing("channel_epilogue_h"))?;
            let null = 0u64;
            let (co_i, p_i, act_i, n_i) = (co as i32, (ho * wo) as i32, plan.act, n as i32);
            let y16 = s16.c.slice(..out_len);
            let mut b = stream.launch_builder(f);
            b.arg(&y16).arg(&mut *y);
            match &plan.shift {
                Some(s) => b.arg(s),
                None => b.arg(&null),
            };
            b.arg(&co_i).arg(&p_i).arg(&act_i).arg(&n_i);
            // SAFETY: n·co·p halves in, as many floats out.
            unsafe { b.launch(elems(out_len)) }.map_err(cuda_err)?;
            Ok(())
        }
        (Kcrs::H(_), None) => Err(missing("f16 scratch")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_choices_parse_and_name_the_allowed_values() {
        assert_eq!(ConvChoice::parse("auto").unwrap(), ConvChoice::Auto);
        assert_eq!(
            ConvChoice::parse("cudnn").unwrap(),
            ConvChoice::Path(ConvPath::Cudnn)
        );
        assert_eq!(
            ConvChoice::parse("im2col").unwrap(),
            ConvChoice::Path(ConvPath::Im2col)
        );
        let e = ConvChoice::parse("winograd").unwrap_err().to_string();
        assert!(
            e.contains("--conv") && e.contains("auto, cudnn, im2col"),
            "{e}"
        );
        for p in [ConvPath::Cudnn, ConvPath::Im2col] {
            assert_eq!(ConvChoice::parse(p.name()).unwrap(), ConvChoice::Path(p));
        }
    }
}
