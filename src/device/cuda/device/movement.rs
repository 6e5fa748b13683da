//! Moving rows between the members' slots and scratch: the gather that assembles a node's
//! input rows from wherever each member's producers left them (one `copy_segments` launch per
//! source buffer), the scatter that writes the computed rows back to the members' output slots,
//! and the capture that copies final outputs to the host for `verify`.

use super::*;

impl CudaDevice {
    /// Runs the copies in `self.segs` into scratch `dst`: one launch per source buffer (node
    /// buffers, or fills).
    pub(super) fn copy_segs(&mut self, dst: Buf) -> Result<()> {
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            segs,
            seg_host,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let f = funcs
            .get("copy_segments")
            .ok_or_else(|| missing("copy_segments"))?;
        let mut done = vec![false; segs.len()];
        for s0 in 0..segs.len() {
            if done[s0] {
                continue;
            }
            let key = segs[s0].src;
            seg_host.clear();
            let mut fill = 0.0f32;
            for (j, s) in segs.iter().enumerate() {
                let same = match (key, s.src) {
                    (Src::Node { node: a, .. }, Src::Node { node: b, off }) if a == b => {
                        seg_host.extend_from_slice(&[off as i64, s.dst as i64, s.len as i64]);
                        true
                    }
                    (Src::Fill(a), Src::Fill(b)) if a == b => {
                        fill = b;
                        seg_host.extend_from_slice(&[-1, s.dst as i64, s.len as i64]);
                        true
                    }
                    _ => false,
                };
                if same {
                    done[j] = true;
                }
            }
            let n = seg_host.len();
            stream
                .memcpy_htod(&seg_host[..], &mut sc.seg.slice_mut(..n))
                .map_err(cuda_err)?;
            let nseg = (n / 3) as i32;
            let src: &CudaSlice<f32> = match key {
                Src::Node { node, .. } => &nodes[node].out,
                Src::Fill(_) => &nodes[0].out, // unread: every segment is a fill
            };
            let mut b = stream.launch_builder(f);
            match dst {
                Buf::A => b.arg(src).arg(&mut sc.a),
                Buf::C => b.arg(src).arg(&mut sc.c),
            };
            b.arg(&sc.seg).arg(&nseg).arg(&fill);
            // SAFETY: every segment lies inside its source buffer and inside the scratch (sized
            // at prepare for the largest gather).
            unsafe { b.launch(blocks(nseg as usize, 256, 0)) }.map_err(cuda_err)?;
        }
        segs.clear();
        Ok(())
    }

    /// Gathers node `i`'s concatenated input rows for `members` into scratch A; returns the row
    /// count.
    pub(super) fn gather(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<usize> {
        let node = &model.nodes[i];
        let width = self.nodes[i].in_feat;
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let mut rows = 0;
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                let mut off = rows * width;
                for (k, inp) in node.inputs.iter().enumerate() {
                    layout.input_segs(model, node, inp, m, r, |s| {
                        self.segs.push(Seg {
                            dst: s.dst + off,
                            ..s
                        })
                    });
                    off += node.in_shapes[k].feat.iter().product::<usize>();
                }
                rows += 1;
            }
        }
        self.copy_segs(Buf::A)?;
        Ok(rows)
    }

    /// Scatters `width`-wide rows of scratch `from` to the members' output rows of node `i`.
    pub(super) fn scatter(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        from: Buf,
    ) -> Result<()> {
        let node = &model.nodes[i];
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            seg_host,
            layout,
            ..
        } = self;
        let layout = layout.as_ref().ok_or_else(|| missing("layout"))?;
        let feat = layout.nodes[i].feat;
        seg_host.clear();
        let mut r_at = 0;
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                let pos = layout.out_pos(model, i, step, r, m.len);
                seg_host.extend_from_slice(&[
                    (r_at * feat) as i64,
                    layout.offset(i, m.slot, pos) as i64,
                    feat as i64,
                ]);
                r_at += 1;
            }
        }
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let n = seg_host.len();
        stream
            .memcpy_htod(&seg_host[..], &mut sc.seg.slice_mut(..n))
            .map_err(cuda_err)?;
        let nseg = (n / 3) as i32;
        let fill = 0.0f32;
        let f = funcs
            .get("copy_segments")
            .ok_or_else(|| missing("copy_segments"))?;
        let mut b = stream.launch_builder(f);
        match from {
            Buf::A => b.arg(&sc.a),
            Buf::C => b.arg(&sc.c),
        };
        b.arg(&mut nodes[i].out).arg(&sc.seg).arg(&nseg).arg(&fill);
        // SAFETY: offsets come from the layout the buffers were allocated with.
        unsafe { b.launch(blocks(nseg as usize, 256, 0)) }.map_err(cuda_err)?;
        Ok(())
    }

    /// Gathers only the first input's rows (the query) into scratch A; returns the row count.
    pub(super) fn gather_first_input(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
    ) -> Result<usize> {
        let node = &model.nodes[i];
        let width: usize = node.in_shapes[0].feat.iter().product();
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let mut rows = 0;
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                let off = rows * width;
                layout.input_segs(model, node, &node.inputs[0], m, r, |s| {
                    self.segs.push(Seg {
                        dst: s.dst + off,
                        ..s
                    })
                });
                rows += 1;
            }
        }
        self.copy_segs(Buf::A)?;
        Ok(rows)
    }

    /// Copies node `i`'s output rows of `members` to the host, when capturing: only those
    /// rows, not the whole node buffer (205 MB for a ResNet conv1 at batch 64).
    pub(super) fn capture_outputs(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
    ) -> Result<()> {
        if !self.capture.wants(model, i) {
            return Ok(());
        }
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let feat = layout.nodes[i].feat;
        let node = &model.nodes[i];
        let out = &self.nodes[i].out;
        let mut rows = Vec::with_capacity(members.len());
        for m in members {
            let n = Layout::rows(node, m.len);
            let mut v = vec![0.0f32; n * feat];
            for (r, dst) in v.chunks_exact_mut(feat.max(1)).enumerate() {
                let o = layout.offset(i, m.slot, layout.out_pos(model, i, m.step, r, m.len));
                let src = out.slice(o..o + feat);
                self.stream.memcpy_dtoh(&src, dst).map_err(cuda_err)?;
            }
            rows.push((m.step, m.input, v));
        }
        self.stream.synchronize().map_err(cuda_err)?;
        for (step, input, v) in rows {
            self.capture.record(model, i, step, input, v);
        }
        Ok(())
    }
}
