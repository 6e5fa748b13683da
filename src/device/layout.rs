//! Where a request's activations live on a real device: every node's output buffer holds, per
//! slot, `cap` rows of `feat` elements — a static node's rows, one row per step for a loop node
//! read outside its loop, or two rows (step parity) otherwise. [`Layout`] answers which row a
//! value sits in and which copies assemble a node's input rows. The CPU device performs those
//! copies directly; the CUDA device turns them into one gather kernel per source buffer.

use super::Member;
use crate::graph::op::Op;
use crate::graph::{Input, Lengths, Model, Node, Rows, View};

/// How a node's output buffer is laid out per slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// A static node: its rows (1, the sequence length, or a fixed count).
    Static,
    /// A loop node read outside its loop: one row per step, by position.
    AllSteps,
    /// A loop node read only within its loop: two rows, by step parity.
    Parity,
}

/// One node's buffer shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLayout {
    /// Layout kind.
    pub storage: Storage,
    /// Elements per row.
    pub feat: usize,
    /// Rows per slot.
    pub cap: usize,
}

/// Where a piece of an input row comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Src {
    /// `len` elements of node `node`'s buffer at element offset `off`.
    Node {
        /// Producer node index.
        node: usize,
        /// Element offset in its buffer.
        off: usize,
    },
    /// `len` copies of a constant (zeros, or the start token).
    Fill(f32),
}

/// One copy that assembles part of an input row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Seg {
    /// Source.
    pub src: Src,
    /// Destination offset in the row buffer.
    pub dst: usize,
    /// Elements.
    pub len: usize,
}

#[cfg(feature = "cuda")]
impl Seg {
    /// Appends `s` to `segs`, merged into the last segment when it continues it (the next
    /// elements of the same source into the next destination elements): a request's rows,
    /// which [`Layout::input_segs`] gives a segment each, become one copy where they lie one
    /// after another (BERT's batch of 64 staged 8,192 row segments a node).
    pub(crate) fn push_coalesced(segs: &mut Vec<Seg>, s: Seg) {
        if let Some(last) = segs.last_mut() {
            let follows = match (last.src, s.src) {
                (Src::Node { node: a, off: o }, Src::Node { node: b, off: p }) => {
                    a == b && o + last.len == p
                }
                (Src::Fill(a), Src::Fill(b)) => a.to_bits() == b.to_bits(),
                (Src::Node { .. }, Src::Fill(_)) | (Src::Fill(_), Src::Node { .. }) => false,
            };
            if follows && last.dst + last.len == s.dst {
                last.len += s.len;
                return;
            }
        }
        segs.push(s);
    }
}

/// The buffer layout of a model on a real device.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Per node.
    pub nodes: Vec<NodeLayout>,
    /// Slots.
    pub max_batch: usize,
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

impl Layout {
    /// The layout of `model` for `max_batch` slots.
    pub fn new(model: &Model, max_batch: usize) -> Layout {
        let mut collected = vec![false; model.nodes.len()];
        for n in &model.nodes {
            for inp in &n.inputs {
                if matches!(inp.view, View::Collected | View::CollectedStepRows { .. }) {
                    collected[inp.node.idx()] = true;
                }
            }
        }
        let max_len = Lengths {
            enc: model.seq.as_ref().map_or(1, |s| s.max_enc),
            dec: model.seq.as_ref().map_or(1, |s| s.max_dec),
        };
        let nodes = model
            .nodes
            .iter()
            .map(|n| {
                let feat = numel(&n.out.feat);
                let (storage, cap) = match n.loop_id {
                    None => (Storage::Static, n.out.rows.count(max_len.enc) as usize),
                    Some(l) if collected[n.id.idx()] => (
                        Storage::AllSteps,
                        model.loop_steps(&model.loops[l.0 as usize], max_len) as usize,
                    ),
                    Some(_) => (Storage::Parity, 2),
                };
                NodeLayout { storage, feat, cap }
            })
            .collect();
        Layout { nodes, max_batch }
    }

    /// Elements in node `i`'s buffer.
    pub(crate) fn buffer_len(&self, i: usize) -> usize {
        let n = &self.nodes[i];
        self.max_batch * n.cap * n.feat
    }

    /// Element offset of row `pos` of `slot` in node `i`'s buffer.
    pub(crate) fn offset(&self, i: usize, slot: u32, pos: usize) -> usize {
        let n = &self.nodes[i];
        (slot as usize * n.cap + pos) * n.feat
    }

    /// Loop iterations of node `node` for a request (1 for static nodes).
    pub(crate) fn loop_steps(model: &Model, node: &Node, len: Lengths) -> usize {
        node.loop_id.map_or(1, |l| {
            model.loop_steps(&model.loops[l.0 as usize], len) as usize
        })
    }

    /// Row of node `i`'s slot where its value at `step` lives.
    pub(crate) fn pos(&self, model: &Model, i: usize, step: u32, len: Lengths) -> usize {
        let n = &model.nodes[i];
        match self.nodes[i].storage {
            Storage::Static => 0,
            Storage::Parity => (step % 2) as usize,
            Storage::AllSteps => {
                if matches!(n.op, Op::Lstm { reverse: true, .. }) {
                    Self::loop_steps(model, n, len) - 1 - step as usize
                } else {
                    step as usize
                }
            }
        }
    }

    /// Rows node `node` processes per request.
    pub fn rows(node: &Node, len: Lengths) -> usize {
        if node.loop_id.is_some() {
            1
        } else {
            node.out.rows.count(len.enc) as usize
        }
    }

    /// Valid rows of node `i`'s value for a request (sequences, collected loops).
    pub(crate) fn valid_rows(model: &Model, i: usize, len: Lengths) -> usize {
        let n = &model.nodes[i];
        match n.loop_id {
            Some(_) => Self::loop_steps(model, n, len),
            None => n.out.rows.count(len.enc) as usize,
        }
    }

    /// The row (output position) node `i` writes row `r` of a request to at `step`.
    pub(crate) fn out_pos(
        &self,
        model: &Model,
        i: usize,
        step: u32,
        r: usize,
        len: Lengths,
    ) -> usize {
        if model.nodes[i].loop_id.is_some() {
            self.pos(model, i, step, len)
        } else {
            r
        }
    }

    /// Emits the copies that assemble input `inp` of `node` for member `m` (its slot, lengths and
    /// step), consumer row `r`; each [`Seg::dst`] counts from the start of this input in the row.
    pub(crate) fn input_segs(
        &self,
        model: &Model,
        node: &Node,
        inp: &Input,
        m: &Member,
        r: usize,
        mut emit: impl FnMut(Seg),
    ) {
        let (slot, len, step, dst) = (m.slot, m.len, m.step, 0);
        let p = inp.node.idx();
        let pn = &model.nodes[p];
        let fw = self.nodes[p].feat;
        let from = |pos: usize| Src::Node {
            node: p,
            off: self.offset(p, slot, pos),
        };
        match inp.view {
            View::Same => {
                let pos = match (self.nodes[p].storage, &node.op) {
                    (Storage::Static, _) if pn.out.rows == Rows::One => 0,
                    // a take reads its row (counted back from the last, `from_end`)
                    (Storage::Static, Op::Take { row, from_end }) => match from_end {
                        true => Self::valid_rows(model, p, len).saturating_sub(1 + row),
                        false => *row,
                    },
                    (Storage::Static, _) => r,
                    _ => self.pos(model, p, step, len),
                };
                emit(Seg {
                    src: from(pos),
                    dst,
                    len: fw,
                });
            }
            View::PrevOr(init) if step == 0 => {
                // a decoder-only model's first token, chosen by its prefill
                emit(Seg {
                    src: Src::Node {
                        node: init.idx(),
                        off: self.offset(init.idx(), slot, 0),
                    },
                    dst,
                    len: fw,
                });
            }
            View::Prev | View::PrevOr(_) => {
                if step == 0 {
                    let start = if matches!(pn.op, Op::Argmax) {
                        1.0
                    } else {
                        0.0
                    };
                    emit(Seg {
                        src: Src::Fill(start),
                        dst,
                        len: fw,
                    });
                } else {
                    emit(Seg {
                        src: from(self.pos(model, p, step - 1, len)),
                        dst,
                        len: fw,
                    });
                }
            }
            View::Collected => emit(Seg {
                src: from(r),
                dst,
                len: fw,
            }),
            View::StepRows { ratio, reverse } | View::CollectedStepRows { ratio, reverse } => {
                let steps = Self::loop_steps(model, node, len);
                let pos = if reverse {
                    steps - 1 - step as usize
                } else {
                    step as usize
                };
                let valid = Self::valid_rows(model, p, len);
                for q in 0..ratio as usize {
                    let row = pos * ratio as usize + q;
                    let d = dst + q * fw;
                    if row < valid {
                        emit(Seg {
                            src: from(row),
                            dst: d,
                            len: fw,
                        });
                    } else {
                        emit(Seg {
                            src: Src::Fill(0.0),
                            dst: d,
                            len: fw,
                        });
                    }
                }
            }
        }
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    #[test]
    fn segments_merge_only_where_both_ends_continue() {
        let node = |off| Src::Node { node: 3, off };
        let seg = |src, dst, len| Seg { src, dst, len };
        let mut segs = Vec::new();
        // two rows of one request, one after another at both ends: one copy
        Seg::push_coalesced(&mut segs, seg(node(100), 0, 8));
        Seg::push_coalesced(&mut segs, seg(node(108), 8, 8));
        assert_eq!(segs, [seg(node(100), 0, 16)]);
        // the source jumps (another slot), the destination does not: a new copy
        Seg::push_coalesced(&mut segs, seg(node(300), 16, 8));
        // the destination jumps: a new copy
        Seg::push_coalesced(&mut segs, seg(node(308), 40, 8));
        // another producer: a new copy, even at the next offsets
        Seg::push_coalesced(&mut segs, seg(Src::Node { node: 4, off: 316 }, 48, 8));
        assert_eq!(segs.len(), 4);
        // fills of one value merge; of another, or after a node's rows, do not
        Seg::push_coalesced(&mut segs, seg(Src::Fill(0.0), 56, 4));
        Seg::push_coalesced(&mut segs, seg(Src::Fill(0.0), 60, 4));
        Seg::push_coalesced(&mut segs, seg(Src::Fill(1.0), 64, 4));
        assert_eq!(
            segs[4..],
            [seg(Src::Fill(0.0), 56, 8), seg(Src::Fill(1.0), 64, 4)]
        );
    }
}
