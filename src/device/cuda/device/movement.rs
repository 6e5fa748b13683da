//! Moving rows between the members' slots and scratch: the gather that assembles a node's
//! input rows from wherever each member's producers left them (one `copy_segments` launch per
//! source buffer), the scatter that writes the computed rows back to the members' output slots,
//! and the capture that copies final outputs to the host for `verify`. Neither is staged where
//! the op reads its producer's rows or writes its own rows in place (`stage_gather`,
//! `stage_direct_out`). A node's index tables (segment tables, index arrays) are staged on the
//! host before its first launch and uploaded in one copy (`upload_tables`); the launches then
//! read them at their offsets.

use super::*;

impl CudaDevice {
    /// Appends `v` to the node's staged tables; returns where it starts (in i64s).
    pub(super) fn stage_i64(&mut self, v: &[i64]) -> usize {
        let at = self.host.staged.host.len();
        self.host.staged.host.extend_from_slice(v);
        at
    }

    /// Appends `v` to the node's staged tables, two i32 to an i64 (little-endian, as the GPU
    /// reads them); returns where it starts (in i64s).
    pub(super) fn stage_i32(&mut self, v: &[i32]) -> usize {
        let at = self.host.staged.host.len();
        self.host.staged.host.extend(v.chunks(2).map(|p| {
            let lo = u64::from(p[0] as u32);
            let hi = p.get(1).map_or(0, |&x| u64::from(x as u32));
            (lo | hi << 32) as i64
        }));
        at
    }

    /// Stages the copies in `self.host.segs`: one `copy_segments` launch per source buffer (node
    /// buffers, or fills), each with its segment table.
    pub(super) fn stage_segs(&mut self) {
        let CudaDevice { host, .. } = self;
        let Host { segs, staged, .. } = host;
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
        let width = self.mem.nodes[i].in_feat;
        let layout = self.mem.layout()?;
        let mut rows = 0;
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                let mut off = rows * width;
                for (k, inp) in node.inputs.iter().enumerate() {
                    layout.input_segs(model, node, inp, m, r, |s| {
                        Seg::push_coalesced(
                            &mut self.host.segs,
                            Seg {
                                dst: s.dst + off,
                                ..s
                            },
                        )
                    });
                    off += node.in_shapes[k].feat.iter().product::<usize>();
                }
                rows += 1;
            }
        }
        self.host.staged.rows = rows;
        let feat = layout.nodes[i].feat;
        if let (Op::Flatten | Op::Concat | Op::Take { .. }, Some(off)) =
            (&node.op, self.host.staged.direct_out)
        {
            // a row copy writing in place gathers straight into its rows, unless it reads
            // its own buffer
            let own = self
                .host
                .segs
                .iter()
                .any(|s| matches!(s.src, Src::Node { node, .. } if node == i));
            if own || width != feat {
                self.host.staged.direct_out = None;
            } else {
                self.host.staged.gather_into = Some((i, off));
            }
            self.stage_segs();
            return Ok(());
        }
        let direct = match (in_place(&node.op), self.whole_run(i, rows * width)) {
            (false, _) => None,
            // a row copy's scatter reads its input rows `feat` apart
            (true, _)
                if matches!(node.op, Op::Flatten | Op::Concat | Op::Take { .. })
                    && width != feat =>
            {
                None
            }
            (true, Some((p, off))) => Some(DirectIn::Whole(p, off)),
            (true, None) if matches!(node.op, Op::Add { .. }) && width == 2 * feat => {
                let ws: Vec<usize> = node
                    .in_shapes
                    .iter()
                    .map(|s| s.feat.iter().product())
                    .collect();
                self.input_runs(model, i, members, &ws)?;
                match self.host.staged.runs[..] {
                    [Some(r0), Some(r1)] if ws == [feat, feat] => Some(DirectIn::Pair([r0, r1])),
                    _ => None,
                }
            }
            (true, None) => None,
        };
        self.host.staged.direct_in = direct;
        if direct.is_some() {
            self.host.segs.clear();
        } else {
            self.stage_segs();
        }
        Ok(())
    }

    /// The producer and offset when the gather in `self.host.segs` (of `len` elements into scratch
    /// A) reads one contiguous run of one producer's buffer (not node `i`'s) in order: every
    /// segment from that buffer, each at the same distance from its destination, together
    /// covering all `len` elements (the segments never overlap). Then that run is what the
    /// gather would assemble, and the op can read it in place.
    fn whole_run(&self, i: usize, len: usize) -> Option<(usize, usize)> {
        let mut run = None;
        let mut covered = 0;
        for s in &self.host.segs {
            let Src::Node { node, off } = s.src else {
                return None;
            };
            let base = off.checked_sub(s.dst)?;
            if node == i || run.is_some_and(|r| r != (node, base)) {
                return None;
            }
            run = Some((node, base));
            covered += s.len;
        }
        run.filter(|_| covered == len)
    }

    /// Sets `staged.runs`: for each input of node `i` (`ws` its widths), its run when its
    /// rows for `members` are one contiguous run of one producer's buffer (not node `i`'s), row
    /// after row (as [`Self::whole_run`] for one input).
    fn input_runs(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        ws: &[usize],
    ) -> Result<()> {
        let node = &model.nodes[i];
        let layout = self.mem.layout()?;
        let runs = &mut self.host.staged.runs;
        runs.clear();
        for (k, inp) in node.inputs.iter().enumerate() {
            let w = ws[k];
            let (mut run, mut ok, mut covered, mut rows) = (None, true, 0, 0);
            for m in members {
                for r in 0..Layout::rows(node, m.len) {
                    layout.input_segs(model, node, inp, m, r, |s| {
                        let base = match s.src {
                            Src::Node { node, off } if node != i => {
                                off.checked_sub(rows * w + s.dst).map(|b| (node, b))
                            }
                            _ => None,
                        };
                        match base {
                            Some(b) if run.is_none() || run == Some(b) => run = Some(b),
                            _ => ok = false,
                        }
                        covered += s.len;
                    });
                    rows += 1;
                }
            }
            runs.push(run.filter(|_| ok && covered == rows * w));
        }
        Ok(())
    }

    /// Stages node `i`'s output in place when its rows for `members` are one contiguous run of
    /// its buffer, in order (`staged.direct_out`); the op then computes into them and no
    /// scatter follows.
    pub(super) fn stage_direct_out(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
    ) -> Result<()> {
        let node = &model.nodes[i];
        let layout = self.mem.layout()?;
        let feat = layout.nodes[i].feat;
        let (mut first, mut r_at) = (None, 0);
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                let o = layout.offset(i, m.slot, layout.out_pos(model, i, m.step, r, m.len));
                let o0 = *first.get_or_insert(o);
                if o != o0 + r_at * feat {
                    return Ok(());
                }
                r_at += 1;
            }
        }
        self.host.staged.direct_out = first;
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
        let layout = self.mem.layout()?;
        let mut rows = 0;
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                let off = rows * width;
                layout.input_segs(model, node, &node.inputs[0], m, r, |s| {
                    Seg::push_coalesced(
                        &mut self.host.segs,
                        Seg {
                            dst: s.dst + off,
                            ..s
                        },
                    )
                });
                rows += 1;
            }
        }
        self.host.staged.rows = rows;
        self.stage_segs();
        Ok(())
    }

    /// Stages the copies of `rows` computed rows (stored as the explicit segments `segs`) as
    /// one launch; returns it.
    pub(super) fn stage_copy(&mut self, segs: &[[i64; 3]]) -> SegCopy {
        let at = self.host.staged.host.len();
        let mut max_len = 0;
        for s in segs {
            self.host.staged.host.extend_from_slice(s);
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
        let layout = self.mem.layout()?;
        let feat = layout.nodes[i].feat;
        let at = self.host.staged.host.len();
        // (source, destination, length) per run of rows that lie one after another at both
        // ends: a member's rows are one copy where its slot holds them in order
        let (mut r_at, mut nseg, mut max_len) = (0, 0, 0);
        let staged = &mut self.host.staged.host;
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                let pos = layout.out_pos(model, i, m.step, r, m.len);
                let (src, dst) = ((r_at * feat) as i64, layout.offset(i, m.slot, pos) as i64);
                r_at += 1;
                if let [.., s, d, len] = &mut staged[at..] {
                    if *s + *len == src && *d + *len == dst {
                        *len += feat as i64;
                        max_len = max_len.max(*len as usize);
                        continue;
                    }
                }
                staged.extend_from_slice(&[src, dst, feat as i64]);
                (nseg, max_len) = (nseg + 1, max_len.max(feat));
            }
        }
        self.host.staged.scatter = Some(SegCopy {
            src: Src::Fill(0.0),
            at,
            nseg,
            max_len,
        });
        Ok(())
    }

    /// Uploads the node's staged tables to the device in one copy (none when it has none).
    pub(super) fn upload_tables(&mut self) -> Result<()> {
        let n = self.host.staged.host.len();
        if n == 0 {
            return Ok(());
        }
        let sc = self
            .mem
            .scratch
            .as_mut()
            .ok_or_else(|| missing("scratch"))?;
        if n > sc.tables.len() {
            return Err(Error::Internal(format!(
                "cuda device: {n} index-table entries, room for {}",
                sc.tables.len()
            )));
        }
        self.lib
            .stream
            .memcpy_htod(&self.host.staged.host[..], &mut sc.tables.slice_mut(..n))
            .map_err(cuda_err)
    }

    /// Runs the staged gather into scratch A (or a row copy's own output rows, see
    /// [`Staged::gather_into`]); returns the row count.
    pub(super) fn gather(&mut self) -> Result<usize> {
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs { stream, funcs, .. } = lib;
        let Memory { nodes, scratch, .. } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        for g in &staged.gathers {
            let fill = match g.src {
                Src::Fill(v) => v,
                Src::Node { .. } => 0.0,
            };
            // SAFETY: every segment lies inside its source buffer and inside scratch A (sized
            // at prepare for the largest gather), or inside the node's own output rows.
            match staged.gather_into {
                None => {
                    let src = match g.src {
                        Src::Node { node, .. } => nodes[node].out.slice(..),
                        Src::Fill(_) => nodes[0].out.slice(..), // unread: every segment is a fill
                    };
                    let mut dst = sc.a.slice_mut(..);
                    unsafe { copy_segments(stream, funcs, &src, &mut dst, &sc.tables, *g, fill) }?;
                }
                Some((i, off)) => {
                    let (lo, rest) = nodes.split_at_mut(i);
                    let (me, hi) = rest
                        .split_first_mut()
                        .ok_or_else(|| missing("node buffer"))?;
                    let src = match g.src {
                        Src::Node { node, .. } => Others { lo, hi }.get(node)?.out.slice(..),
                        Src::Fill(_) => sc.a.slice(..), // unread: every segment is a fill
                    };
                    let mut dst = me.out.slice_mut(off..);
                    unsafe { copy_segments(stream, funcs, &src, &mut dst, &sc.tables, *g, fill) }?;
                }
            }
        }
        Ok(staged.rows)
    }

    /// Runs the staged scatter of scratch `from` to node `i`'s output rows; none when the op
    /// computed into them in place. Scratch A's rows come from the producer's run when the op
    /// reads its input in place.
    pub(super) fn scatter(&mut self, i: usize, from: Buf) -> Result<()> {
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs { stream, funcs, .. } = lib;
        let Memory { nodes, scratch, .. } = mem;
        let Host { staged, .. } = host;
        if staged.direct_out.is_some() {
            return Ok(());
        }
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let g = staged.scatter.ok_or_else(|| missing("scatter table"))?;
        let (lo, rest) = nodes.split_at_mut(i);
        let (me, hi) = rest
            .split_first_mut()
            .ok_or_else(|| missing("node buffer"))?;
        let others = Others { lo, hi };
        let src = match (from, staged.direct_in) {
            (Buf::A, Some(DirectIn::Whole(p, off))) => others.get(p)?.out.slice(off..),
            (Buf::A, Some(DirectIn::Pair(_))) => return Err(missing("scatter source")),
            (Buf::A, None) => sc.a.slice(..),
            (Buf::C, _) => sc.c.slice(..),
        };
        // SAFETY: offsets come from the layout the buffers were allocated with.
        unsafe {
            copy_segments(
                stream,
                funcs,
                &src,
                &mut me.out.slice_mut(..),
                &sc.tables,
                g,
                0.0,
            )
        }
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
        let layout = self.mem.layout()?;
        let feat = layout.nodes[i].feat;
        let node = &model.nodes[i];
        let out = &self.mem.nodes[i].out;
        let mut rows = Vec::with_capacity(members.len());
        for m in members {
            let n = Layout::rows(node, m.len);
            let mut v = vec![0.0f32; n * feat];
            for (r, dst) in v.chunks_exact_mut(feat.max(1)).enumerate() {
                let o = layout.offset(i, m.slot, layout.out_pos(model, i, m.step, r, m.len));
                let src = out.slice(o..o + feat);
                self.lib.stream.memcpy_dtoh(&src, dst).map_err(cuda_err)?;
            }
            rows.push((m.step, m.input, v));
        }
        self.lib.stream.synchronize().map_err(cuda_err)?;
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
    src: &CudaView<f32>,
    dst: &mut CudaViewMut<f32>,
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
