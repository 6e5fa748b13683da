//! Moving rows between the members' slots and scratch: the gather that assembles a node's
//! input rows from wherever each member's producers left them (one `copy_segments` launch per
//! source buffer), the scatter that writes the computed rows back to the members' output slots,
//! and the capture that copies final outputs to the host for `verify`. A node's index tables
//! (segment tables, index arrays) are staged on the host before its first launch and uploaded
//! in one copy (`upload_tables`); the launches then read them at their offsets.

use super::*;

impl CudaDevice {
    /// Appends `v` to the node's staged tables; returns where it starts (in i64s).
    pub(super) fn stage_i64(&mut self, v: &[i64]) -> usize {
        let at = self.staged.host.len();
        self.staged.host.extend_from_slice(v);
        at
    }

    /// Appends `v` to the node's staged tables, two i32 to an i64 (little-endian, as the GPU
    /// reads them); returns where it starts (in i64s).
    pub(super) fn stage_i32(&mut self, v: &[i32]) -> usize {
        let at = self.staged.host.len();
        self.staged.host.extend(v.chunks(2).map(|p| {
            let lo = u64::from(p[0] as u32);
            let hi = p.get(1).map_or(0, |&x| u64::from(x as u32));
            (lo | hi << 32) as i64
        }));
        at
    }

    /// Stages the copies in `self.segs`: one `copy_segments` launch per source buffer (node
    /// buffers, or fills), each with its segment table.
    pub(super) fn stage_segs(&mut self) {
        let CudaDevice { segs, staged, .. } = self;
        let mut done = vec![false; segs.len()];
        for s0 in 0..segs.len() {
            if done[s0] {
                continue;
            }
            let key = segs[s0].src;
            let at = staged.host.len();
            let mut max_len = 0;
            for (j, s) in segs.iter().enumerate() {
                let from = match (key, s.src) {
                    (Src::Node { node: a, .. }, Src::Node { node: b, off }) if a == b => off as i64,
                    (Src::Fill(a), Src::Fill(b)) if a == b => -1,
                    _ => continue,
                };
                staged
                    .host
                    .extend_from_slice(&[from, s.dst as i64, s.len as i64]);
                max_len = max_len.max(s.len);
                done[j] = true;
            }
            staged.gathers.push(SegCopy {
                src: key,
                at,
                nseg: (staged.host.len() - at) / 3,
                max_len,
            });
        }
        segs.clear();
    }

    /// Stages the gather of node `i`'s concatenated input rows for `members` (into scratch A).
    pub(super) fn stage_gather(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
    ) -> Result<()> {
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
        self.staged.rows = rows;
        self.stage_segs();
        Ok(())
    }

    /// Stages the gather of only the first input's rows (the query), into scratch A.
    pub(super) fn stage_gather_first_input(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
    ) -> Result<()> {
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
        self.staged.rows = rows;
        self.stage_segs();
        Ok(())
    }

    /// Stages the copies of `rows` computed rows (stored as the explicit segments `segs`) as
    /// one launch; returns it.
    pub(super) fn stage_copy(&mut self, segs: &[[i64; 3]]) -> SegCopy {
        let at = self.staged.host.len();
        let mut max_len = 0;
        for s in segs {
            self.staged.host.extend_from_slice(s);
            max_len = max_len.max(s[2] as usize);
        }
        SegCopy {
            src: Src::Fill(0.0),
            at,
            nseg: segs.len(),
            max_len,
        }
    }

    /// Stages the scatter of node `i`'s computed rows (`feat` wide, one after another in
    /// scratch) to the members' output rows.
    pub(super) fn stage_scatter(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
    ) -> Result<()> {
        let node = &model.nodes[i];
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let feat = layout.nodes[i].feat;
        let at = self.staged.host.len();
        let mut r_at = 0;
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                let pos = layout.out_pos(model, i, m.step, r, m.len);
                self.staged.host.extend_from_slice(&[
                    (r_at * feat) as i64,
                    layout.offset(i, m.slot, pos) as i64,
                    feat as i64,
                ]);
                r_at += 1;
            }
        }
        self.staged.scatter = Some(SegCopy {
            src: Src::Fill(0.0),
            at,
            nseg: r_at,
            max_len: feat,
        });
        Ok(())
    }

    /// Uploads the node's staged tables to the device in one copy (none when it has none).
    pub(super) fn upload_tables(&mut self) -> Result<()> {
        let n = self.staged.host.len();
        if n == 0 {
            return Ok(());
        }
        let sc = self.scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        if n > sc.tables.len() {
            return Err(Error::Internal(format!(
                "cuda device: {n} index-table entries, room for {}",
                sc.tables.len()
            )));
        }
        self.stream
            .memcpy_htod(&self.staged.host[..], &mut sc.tables.slice_mut(..n))
            .map_err(cuda_err)
    }

    /// Runs the staged gather into scratch A; returns the row count.
    pub(super) fn gather(&mut self) -> Result<usize> {
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            staged,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        for g in &staged.gathers {
            let src: &CudaSlice<f32> = match g.src {
                Src::Node { node, .. } => &nodes[node].out,
                Src::Fill(_) => &nodes[0].out, // unread: every segment is a fill
            };
            let fill = match g.src {
                Src::Fill(v) => v,
                Src::Node { .. } => 0.0,
            };
            // SAFETY: every segment lies inside its source buffer and inside scratch A (sized
            // at prepare for the largest gather).
            unsafe { copy_segments(stream, funcs, src, &mut sc.a, &sc.tables, *g, fill) }?;
        }
        Ok(staged.rows)
    }

    /// Runs the staged scatter of scratch `from` to node `i`'s output rows.
    pub(super) fn scatter(&mut self, i: usize, from: Buf) -> Result<()> {
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            staged,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let g = staged.scatter.ok_or_else(|| missing("scatter table"))?;
        let src = match from {
            Buf::A => &sc.a,
            Buf::C => &sc.c,
        };
        // SAFETY: offsets come from the layout the buffers were allocated with.
        unsafe { copy_segments(stream, funcs, src, &mut nodes[i].out, &sc.tables, g, 0.0) }
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

/// A `copy_segments` launch (kernels/gather.cu) of the staged table `g` from `src` to `dst`:
/// a block of 256 threads per segment and chunk of 4096 floats of the longest segment.
///
/// # Safety
/// Every segment of `g` must lie inside `src` and `dst`.
pub(super) unsafe fn copy_segments(
    stream: &CudaStream,
    funcs: &HashMap<String, CudaFunction>,
    src: &CudaSlice<f32>,
    dst: &mut CudaSlice<f32>,
    tables: &CudaSlice<i64>,
    g: SegCopy,
    fill: f32,
) -> Result<()> {
    if g.nseg == 0 {
        return Ok(());
    }
    let f = funcs
        .get("copy_segments")
        .ok_or_else(|| missing("copy_segments"))?;
    const THREADS: u32 = 256;
    let chunks = g.max_len.div_ceil(16 * THREADS as usize).clamp(1, 65_535) as u32;
    let cfg = LaunchConfig {
        grid_dim: (g.nseg.min(i32::MAX as usize) as u32, chunks, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let table = tables.slice(g.at..g.at + 3 * g.nseg);
    let nseg = g.nseg as i32;
    let mut b = stream.launch_builder(f);
    b.arg(src).arg(dst).arg(&table).arg(&nseg).arg(&fill);
    b.launch(cfg).map_err(cuda_err)?;
    Ok(())
}
