//! Attention: additive and dot attention over a sequence, multi-head self-attention, and decoder self-attention over a per-slot key/value cache.

use super::*;

impl CudaDevice {
    pub(super) fn attention(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        mode: AttnMode,
        heads: usize,
    ) -> Result<()> {
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let d = layout.nodes[i].feat;
        let max_dec = self.max_dec;
        let AttnShape {
            qstride,
            kv_node,
            kstride,
            vstride,
            dh,
            dv,
            additive,
        } = self.attn_rows(model, i, members, mode, heads)?;
        let qrows = self.gather_first_input(model, i, members)?;
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            host_i64,
            host_i64b,
            host_i32,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        stream
            .memcpy_htod(&host_i64[..], &mut sc.i64a.slice_mut(..qrows))
            .map_err(cuda_err)?;
        stream
            .memcpy_htod(&host_i64b[..], &mut sc.i64b.slice_mut(..qrows))
            .map_err(cuda_err)?;
        stream
            .memcpy_htod(&host_i32[..], &mut sc.i32a.slice_mut(..qrows))
            .map_err(cuda_err)?;
        if kv_node.is_none() {
            let cache = nodes[i].state.as_mut().ok_or_else(|| missing("kv cache"))?;
            append_to_cache(stream, funcs, sc, cache, members, (d, max_dec))?;
        }
        let max_keys = host_i32.iter().copied().max().unwrap_or(1).max(1) as u32;
        // multi-head attention scales by 1/sqrt(head width); LAS's content attention does not
        let scale = if matches!(mode, AttnMode::Dot | AttnMode::Additive) {
            1.0
        } else {
            1.0 / (dh as f32).sqrt()
        };
        let null = 0u64;
        let ints = [
            kstride as i32,
            vstride as i32,
            heads as i32,
            dh as i32,
            dv as i32,
        ];
        let (q_i, o_i, mode_i) = (qstride as i32, d as i32, i32::from(additive));
        let f = funcs
            .get("attend_rows")
            .ok_or_else(|| missing("attend_rows"))?;
        let (kbuf, vbuf) = match kv_node {
            Some((kp, vp)) => (&nodes[kp].out, &nodes[vp].out),
            None => {
                let c = nodes[i].state.as_ref().ok_or_else(|| missing("kv cache"))?;
                (c, c)
            }
        };
        let w = &nodes[i].w;
        let mut b = stream.launch_builder(f);
        b.arg(&sc.a)
            .arg(&q_i)
            .arg(kbuf)
            .arg(vbuf)
            .arg(&sc.i64a)
            .arg(&sc.i64b)
            .arg(&sc.i32a);
        for x in &ints {
            b.arg(x);
        }
        b.arg(&scale).arg(&mode_i);
        match (&w.w, &w.bias) {
            (Some(vn), Some(bb)) if additive => b.arg(vn).arg(bb),
            _ => b.arg(&null).arg(&null),
        };
        b.arg(&mut sc.c).arg(&o_i);
        let rows_heads = qrows * heads;
        // SAFETY: one block per (query row, head); scores in dynamic shared memory.
        unsafe { b.launch(blocks(rows_heads, 128, 4 * max_keys)) }.map_err(cuda_err)?;
        self.scatter(model, i, members, Buf::C)
    }

    /// Per query row of the sub-batch, into the host staging buffers: where its keys and
    /// values start and how many keys it has; and the strides and widths of `mode`.
    fn attn_rows(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        mode: AttnMode,
        heads: usize,
    ) -> Result<AttnShape> {
        let node = &model.nodes[i];
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let d = layout.nodes[i].feat;
        let max_dec = self.max_dec;
        self.host_i64.clear();
        self.host_i64b.clear();
        self.host_i32.clear();
        // per query row: key and value base offsets and key counts; then the strides
        Ok(match mode {
            AttnMode::Additive | AttnMode::Dot => {
                let kp = node.inputs[1].node.idx();
                let vp = node.inputs[2].node.idx();
                for m in members {
                    self.host_i64.push(layout.offset(kp, m.slot, 0) as i64);
                    self.host_i64b.push(layout.offset(vp, m.slot, 0) as i64);
                    self.host_i32
                        .push(Layout::valid_rows(model, kp, m.len) as i32);
                }
                let qstride = node.in_shapes[0].feat[0];
                AttnShape {
                    qstride,
                    kv_node: Some((kp, vp)),
                    kstride: layout.nodes[kp].feat,
                    vstride: layout.nodes[vp].feat,
                    dh: qstride,
                    dv: d,
                    additive: mode == AttnMode::Additive,
                }
            }
            AttnMode::SelfAttn if node.class == Class::Decoder => {
                for m in members {
                    let step = m.step;
                    let base = m.slot as usize * max_dec * 2 * d;
                    self.host_i64.push(base as i64);
                    self.host_i64b.push((base + d) as i64);
                    self.host_i32.push(step as i32 + 1);
                }
                AttnShape::multi_head(3 * d, None, 2 * d, d / heads)
            }
            AttnMode::SelfAttn => {
                let p = node.inputs[0].node.idx();
                for m in members {
                    let rows = Layout::rows(node, m.len);
                    for _ in 0..rows {
                        self.host_i64.push((layout.offset(p, m.slot, 0) + d) as i64);
                        self.host_i64b
                            .push((layout.offset(p, m.slot, 0) + 2 * d) as i64);
                        self.host_i32.push(rows as i32);
                    }
                }
                AttnShape::multi_head(3 * d, Some((p, p)), 3 * d, d / heads)
            }
            AttnMode::Cross => {
                let kvp = node.inputs[1].node.idx();
                for m in members {
                    for _ in 0..Layout::rows(node, m.len) {
                        self.host_i64.push(layout.offset(kvp, m.slot, 0) as i64);
                        self.host_i64b
                            .push((layout.offset(kvp, m.slot, 0) + d) as i64);
                        self.host_i32
                            .push(Layout::valid_rows(model, kvp, m.len) as i32);
                    }
                }
                AttnShape::multi_head(d, Some((kvp, kvp)), 2 * d, d / heads)
            }
        })
    }
}

impl AttnShape {
    /// Multi-head dot attention: queries `qstride` apart, keys and values from `kv_node` (None:
    /// the decoder's K|V cache) in rows `kvstride` apart, heads `head` wide.
    fn multi_head(
        qstride: usize,
        kv_node: Option<(usize, usize)>,
        kvstride: usize,
        head: usize,
    ) -> AttnShape {
        AttnShape {
            qstride,
            kv_node,
            kstride: kvstride,
            vstride: kvstride,
            dh: head,
            dv: head,
            additive: false,
        }
    }
}

/// Appends this step's keys and values (columns `d..3d` of the gathered Q|K|V rows in scratch
/// A) to each member's slot of the decoder's K|V `cache` (`max_dec` steps per slot).
fn append_to_cache(
    stream: &Arc<CudaStream>,
    funcs: &HashMap<String, CudaFunction>,
    sc: &mut Scratch,
    cache: &mut CudaSlice<f32>,
    members: &[Member],
    (d, max_dec): (usize, usize),
) -> Result<()> {
    let f = funcs
        .get("copy_segments")
        .ok_or_else(|| missing("copy_segments"))?;
    let segs: Vec<i64> = members
        .iter()
        .enumerate()
        .flat_map(|(r, m)| {
            [
                (r * 3 * d + d) as i64,
                (m.slot as usize * max_dec * 2 * d + m.step as usize * 2 * d) as i64,
                (2 * d) as i64,
            ]
        })
        .collect();
    stream
        .memcpy_htod(&segs[..], &mut sc.seg.slice_mut(..segs.len()))
        .map_err(cuda_err)?;
    let n = (segs.len() / 3) as i32;
    let fill = 0.0f32;
    let mut b = stream.launch_builder(f);
    b.arg(&sc.a).arg(cache).arg(&sc.seg).arg(&n).arg(&fill);
    // SAFETY: the cache holds max_dec steps per slot; step < max_dec (checked in execute).
    unsafe { b.launch(blocks(n as usize, 256, 0)) }.map_err(cuda_err)?;
    Ok(())
}
