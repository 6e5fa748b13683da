//! From the parsed nodes to a [`Model`], in three passes: names, classes and loops; ops and
//! input references; then shapes and costs, by a fixpoint because loops feed values back with
//! `@prev`. Every error names the file, the line and the field.

use super::ops::op_fields;
use super::*;

/// What pass 1 finds: each node's id by name, the loops, and each node's class and loop.
struct Classified<'r> {
    by_name: HashMap<&'r str, NodeId>,
    loops: Vec<Loop>,
    classes: Vec<(Class, Option<LoopId>)>,
}

/// What pass 2 finds for one node: its op, its input references (node, `@prev`, line), and the
/// (vocab, dim) of the table a tied op reads.
struct Pending {
    op: Op,
    refs: Vec<(NodeId, bool, usize)>,
    tied_table: Option<(usize, usize)>,
}

/// The model's identity and settings, as the file gives them.
pub(super) struct Header {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) source: String,
    pub(super) max_batch: u32,
    pub(super) seq: Option<SeqConfig>,
}

impl Parser<'_> {
    /// Builds the model of `header` from its nodes.
    pub(super) fn build(&self, header: Header, raws: &[RawNode]) -> Result<Model> {
        let c = self.classify(header.seq.as_ref(), raws)?;
        let pend = self.resolve_ops(header.seq.as_ref(), raws, &c)?;
        let nodes = self.infer_shapes(raws, &c, &pend)?;
        let Header {
            name,
            description,
            source,
            max_batch,
            seq,
        } = header;
        let loops = c.loops;
        if !nodes.iter().any(|n| matches!(n.op, Op::Input { .. })) {
            return Err(self.err(1, "node", "the model has no input node"));
        }
        if seq.is_some() && !loops.iter().any(|l| l.class == Class::Decoder) {
            return Err(self.err(1, "seq2seq", "a seq2seq model needs a decoder loop"));
        }
        if let Some(s) = &seq {
            if s.ref_enc > s.max_enc || s.ref_dec > s.max_dec {
                return Err(self.err(1, "seq2seq", "reference lengths exceed the maximum lengths"));
            }
        }
        let parts = vec![super::super::Part {
            name: name.clone(),
            first: NodeId(0),
            end: nodes.len() as u32,
            seq: seq.clone(),
        }];
        let node_part = vec![0; nodes.len()];
        Ok(Model {
            name,
            description,
            source,
            max_batch,
            seq,
            nodes,
            loops,
            parts,
            node_part,
            imported: Default::default(),
        })
    }

    /// Pass 1: names, classes and loops (a loop is a run of consecutive nodes of one name).
    fn classify<'r>(&self, seq: Option<&SeqConfig>, raws: &'r [RawNode]) -> Result<Classified<'r>> {
        let mut c = Classified {
            by_name: HashMap::new(),
            loops: Vec::new(),
            classes: Vec::with_capacity(raws.len()),
        };
        let mut loop_names_done: Vec<String> = Vec::new();
        for (i, raw) in raws.iter().enumerate() {
            let ctx = format!("node '{}': ", raw.name);
            if raw.name.is_empty()
                || !raw
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
            {
                return Err(self.err(raw.line, format!("{ctx}name"), "use only [A-Za-z0-9_.-]"));
            }
            if c.by_name.insert(&raw.name, NodeId(i as u32)).is_some() {
                return Err(self.err(raw.line, format!("{ctx}name"), "duplicate node name"));
            }
            let class = self.node_class(raw, &ctx, seq)?;
            let loop_name = self.get_str(raw.table, "loop", &ctx, raw.line)?;
            let div = self.get_uint(raw.table, "div", &ctx)?;
            if class == Class::Static && (loop_name.is_some() || div.is_some()) {
                return Err(self.err(
                    raw.line,
                    format!("{ctx}loop"),
                    "static nodes are in no loop",
                ));
            }
            if class == Class::Decoder && div.is_some_and(|d| d != 1) {
                return Err(self.err(
                    raw.line,
                    format!("{ctx}div"),
                    "only encoder loops may have div",
                ));
            }
            let loop_id = if class == Class::Static {
                None
            } else {
                let lname = loop_name.unwrap_or_else(|| class.to_string());
                let div = div.unwrap_or(1) as u32;
                let continues = c
                    .loops
                    .last()
                    .is_some_and(|l: &Loop| l.name == lname && l.last.idx() + 1 == i);
                if continues {
                    let l = c
                        .loops
                        .last_mut()
                        .ok_or_else(|| Error::Internal("loop".into()))?;
                    if l.class != class || l.div != div {
                        return Err(self.err(
                            raw.line,
                            format!("{ctx}loop"),
                            format!("loop '{lname}' mixes classes or div values"),
                        ));
                    }
                    l.last = NodeId(i as u32);
                } else {
                    if loop_names_done.contains(&lname) {
                        return Err(self.err(
                            raw.line,
                            format!("{ctx}loop"),
                            format!("loop '{lname}' is split: its nodes must be consecutive"),
                        ));
                    }
                    loop_names_done.push(lname.clone());
                    c.loops.push(Loop {
                        name: lname,
                        class,
                        div,
                        first: NodeId(i as u32),
                        last: NodeId(i as u32),
                    });
                }
                Some(LoopId(c.loops.len() as u32 - 1))
            };
            c.classes.push((class, loop_id));
        }
        Ok(c)
    }

    /// A node's `class` field.
    fn node_class(&self, raw: &RawNode, ctx: &str, seq: Option<&SeqConfig>) -> Result<Class> {
        let class = match self.get_str(raw.table, "class", ctx, raw.line)?.as_deref() {
            None | Some("static") => Class::Static,
            Some("encoder") => Class::Encoder,
            Some("decoder") => Class::Decoder,
            Some(o) => {
                return Err(self.err(
                    self.field(raw.table, "class").map_or(raw.line, |f| f.line),
                    format!("{ctx}class"),
                    format!("unknown class '{o}' (static, encoder, decoder)"),
                ))
            }
        };
        if class != Class::Static && seq.is_none() {
            return Err(self.err(
                raw.line,
                format!("{ctx}class"),
                "encoder/decoder nodes need a [seq2seq] table in the model file",
            ));
        }
        Ok(class)
    }

    /// Pass 2: every node's op (only its op's fields allowed) and its input references.
    fn resolve_ops(
        &self,
        seq: Option<&SeqConfig>,
        raws: &[RawNode],
        c: &Classified,
    ) -> Result<Vec<Pending>> {
        let mut pend: Vec<Pending> = Vec::with_capacity(raws.len());
        for (i, raw) in raws.iter().enumerate() {
            let ctx = format!("node '{}': ", raw.name);
            let t = raw.table;
            let op_name = self
                .get_str(t, "op", &ctx, raw.line)?
                .ok_or_else(|| self.err(raw.line, format!("{ctx}op"), "missing"))?;
            let allowed = op_fields(&op_name).ok_or_else(|| {
                self.err(
                    self.field(t, "op").map_or(raw.line, |f| f.line),
                    format!("{ctx}op"),
                    format!("unknown op '{op_name}' (see docs/model-format.md)"),
                )
            })?;
            for (k, item) in t.iter() {
                if !COMMON_FIELDS.contains(&k) && !allowed.contains(&k) {
                    return Err(self.err(
                        self.line_of(item.span()).max(raw.line),
                        format!("{ctx}{k}"),
                        format!("unknown field for op {op_name}"),
                    ));
                }
            }
            let mut op = self.parse_op(raw, &op_name, &ctx)?;
            self.scale.apply(&mut op);
            let loop_id = c.classes[i].1;
            let input_names = self.input_names(raw, &ctx)?;
            if matches!(op, Op::Input { .. }) != input_names.is_empty() {
                return Err(self.err(
                    raw.line,
                    format!("{ctx}inputs"),
                    if input_names.is_empty() {
                        "missing (only op input has no inputs)"
                    } else {
                        "an input node takes no inputs"
                    },
                ));
            }
            if let Op::Input { rows, .. } = &op {
                if loop_id.is_some() {
                    return Err(self.err(raw.line, format!("{ctx}class"), "inputs are static"));
                }
                if matches!(rows, Rows::Src { .. }) && seq.is_none() {
                    return Err(self.err(
                        raw.line,
                        format!("{ctx}seq"),
                        "seq = \"src\" needs a [seq2seq] table",
                    ));
                }
            }
            let refs = input_names
                .iter()
                .map(|(iname, iline)| self.input_ref(c, i, &ctx, iname, *iline))
                .collect::<Result<Vec<_>>>()?;
            let tied_table = self.tied_table(c, &pend, i, raw, &ctx, &op)?;
            pend.push(Pending {
                op,
                refs,
                tied_table,
            });
        }
        Ok(pend)
    }

    /// A node's `inputs` field: names with their line.
    fn input_names(&self, raw: &RawNode, ctx: &str) -> Result<Vec<(String, usize)>> {
        let Some(f) = self.field(raw.table, "inputs") else {
            return Ok(Vec::new());
        };
        let bad = || {
            self.err(
                f.line,
                format!("{ctx}inputs"),
                "expected a list of node names",
            )
        };
        let a = f.value.as_array().ok_or_else(bad)?;
        a.iter()
            .map(|v| v.as_str().map(|s| (s.to_string(), f.line)).ok_or_else(bad))
            .collect()
    }

    /// Input `iname` of node `i`: the node it names, and whether it reads the previous step.
    fn input_ref(
        &self,
        c: &Classified,
        i: usize,
        ctx: &str,
        iname: &str,
        iline: usize,
    ) -> Result<(NodeId, bool, usize)> {
        let loop_id = c.classes[i].1;
        let (base, prev) = match iname.strip_suffix("@prev") {
            Some(b) => (b, true),
            None => (iname, false),
        };
        let field = format!("{ctx}inputs");
        let pid = *c
            .by_name
            .get(base)
            .ok_or_else(|| self.err(iline, &field, format!("unknown node '{base}'")))?;
        let (pclass, ploop) = c.classes[pid.idx()];
        if prev {
            if loop_id.is_none() || ploop != loop_id {
                return Err(self.err(
                    iline,
                    &field,
                    format!("'{iname}': @prev reads a node of the same loop"),
                ));
            }
            if pid.idx() == i {
                return Err(self.err(
                    iline,
                    &field,
                    "a node cannot read itself (an lstm keeps its own state)",
                ));
            }
        } else if pid.idx() >= i {
            return Err(self.err(
                iline,
                &field,
                format!("'{base}' is not defined before this node (inputs must come earlier; use {base}@prev for the previous step)"),
            ));
        } else if pclass == Class::Decoder && ploop != loop_id {
            return Err(self.err(
                iline,
                &field,
                format!("'{base}' is a decoder-loop value; it cannot be read outside its loop"),
            ));
        }
        Ok((pid, prev, iline))
    }

    /// The (vocab, dim) of the embedding a tied linear or embedding reads, checked to be an
    /// earlier embedding that owns its table.
    fn tied_table(
        &self,
        c: &Classified,
        pend: &[Pending],
        i: usize,
        raw: &RawNode,
        ctx: &str,
        op: &Op,
    ) -> Result<Option<(usize, usize)>> {
        let (Op::Linear { tied: Some(n), .. } | Op::Embedding { tied: Some(n), .. }) = op else {
            return Ok(None);
        };
        let tid = c
            .by_name
            .get(n.as_str())
            .filter(|id| id.idx() < i)
            .ok_or_else(|| {
                self.err(
                    raw.line,
                    format!("{ctx}tied"),
                    format!("'{n}' is not an earlier node"),
                )
            })?;
        match &pend[tid.idx()].op {
            Op::Embedding {
                vocab,
                dim,
                tied: None,
                ..
            } => Ok(Some((*vocab, *dim))),
            _ => Err(self.err(
                raw.line,
                format!("{ctx}tied"),
                format!("'{n}' is not an embedding that owns its table"),
            )),
        }
    }

    /// Pass 3: shapes and costs. Loops may feed values back with @prev, so shapes are found by
    /// a fixpoint: a loop node whose inputs are not all known yet gets the output its op alone
    /// implies, and the sweep repeats until every node is inferred from known inputs and
    /// nothing changes.
    fn infer_shapes(
        &self,
        raws: &[RawNode],
        c: &Classified,
        pend: &[Pending],
    ) -> Result<Vec<Node>> {
        let n = raws.len();
        let mut outs: Vec<Option<TensorShape>> = vec![None; n];
        let mut done: Vec<Option<Resolved>> = vec![None; n];
        for _sweep in 0..n + 2 {
            let mut changed = false;
            for i in 0..n {
                let new_out = self.infer_node(raws, c, pend, &outs, i, &mut done[i])?;
                if new_out != outs[i] {
                    outs[i] = new_out;
                    changed = true;
                }
            }
            if !changed && done.iter().all(Option::is_some) {
                break;
            }
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(n);
        for i in 0..n {
            let raw = &raws[i];
            let (Some(out), Some((inputs, in_shapes, cost))) = (outs[i].clone(), done[i].take())
            else {
                return Err(self.err(
                    raw.line,
                    format!("node '{}': inputs", raw.name),
                    "shapes cannot be resolved: an @prev cycle gives no op a known output width",
                ));
            };
            let (class, loop_id) = c.classes[i];
            let op = pend[i].op.clone();
            let keys = match &op {
                Op::Attention { mode, .. } => match mode {
                    AttnMode::SelfAttn if class == Class::Decoder => Keys::Cache,
                    AttnMode::SelfAttn => Keys::OwnRows,
                    _ => Keys::Seq(in_shapes[1].rows),
                },
                _ => Keys::None,
            };
            nodes.push(Node {
                id: NodeId(i as u32),
                name: raw.name.clone(),
                op,
                class,
                loop_id,
                inputs,
                in_shapes,
                out,
                cost,
                line: raw.line,
                keys,
            });
        }
        Ok(nodes)
    }

    /// One node in one sweep: its output shape when its inputs are known (and its resolved
    /// inputs and cost in `done`), the shape its op implies inside a loop, or nothing yet.
    fn infer_node(
        &self,
        raws: &[RawNode],
        c: &Classified,
        pend: &[Pending],
        outs: &[Option<TensorShape>],
        i: usize,
        done: &mut Option<Resolved>,
    ) -> Result<Option<TensorShape>> {
        let raw = &raws[i];
        let ctx = format!("node '{}': ", raw.name);
        let (class, loop_id) = c.classes[i];
        let p = &pend[i];
        let mut inputs = Vec::new();
        let mut shapes = Vec::new();
        for &(pid, prev, iline) in &p.refs {
            let Some(pshape) = outs[pid.idx()].clone() else {
                *done = None;
                return Ok(if loop_id.is_some() {
                    op_implied_row(&p.op).map(|f| TensorShape::new(Rows::One, f))
                } else {
                    None
                });
            };
            let (view, shape) = self.input_view(c, i, &p.op, (pid, prev, iline), pshape, &ctx)?;
            inputs.push(Input { node: pid, view });
            shapes.push(shape);
        }
        let (out, cost) = infer(&p.op, &shapes, class == Class::Decoder, p.tied_table)
            .map_err(|m| self.err(raw.line, format!("{ctx}op {}", p.op.kind_name()), m.0))?;
        let widest = shapes
            .iter()
            .chain([&out])
            .map(|s| numel(&s.feat))
            .fold(cost.in_elems_per_row, u64::max);
        if widest > MAX_ROW_ELEMS || cost.weight_elems > MAX_ROW_ELEMS {
            return Err(self.err(
                raw.line,
                format!("{ctx}op {}", p.op.kind_name()),
                format!(
                    "too large: a row of its input or output, or its weights, would hold more than {MAX_ROW_ELEMS} elements"
                ),
            ));
        }
        if loop_id.is_some() && out.rows != Rows::One {
            return Err(self.err(
                raw.line,
                format!("{ctx}class"),
                "a loop node must produce one row per step",
            ));
        }
        *done = Some((inputs, shapes, cost));
        Ok(Some(out))
    }

    /// How node `i` reads input `pid` (of shape `pshape`) and the per-step shape it sees: the
    /// same step, the previous step, a collected sequence, or consecutive rows of a sequence at
    /// each encoder step.
    fn input_view(
        &self,
        c: &Classified,
        i: usize,
        op: &Op,
        (pid, prev, iline): (NodeId, bool, usize),
        pshape: TensorShape,
        ctx: &str,
    ) -> Result<(View, TensorShape)> {
        let (class, loop_id) = c.classes[i];
        let (_, ploop) = c.classes[pid.idx()];
        if prev {
            return Ok((View::Prev, pshape));
        }
        if ploop.is_some() && ploop == loop_id {
            return Ok((View::Same, pshape));
        }
        let my_div = loop_id.map_or(1, |l| c.loops[l.0 as usize].div);
        let reverse = matches!(op, Op::Lstm { reverse: true, .. });
        let field = format!("{ctx}inputs");
        let (collected, seen) = match ploop {
            Some(pl) => (
                true,
                TensorShape::new(
                    Rows::Src {
                        div: c.loops[pl.0 as usize].div,
                    },
                    pshape.feat.clone(),
                ),
            ),
            None => (false, pshape),
        };
        match (class, seen.rows) {
            (Class::Encoder, Rows::Src { div }) => {
                if my_div % div != 0 {
                    return Err(self.err(
                        iline,
                        &field,
                        format!("loop div {my_div} is not a multiple of the input's div {div}"),
                    ));
                }
                let ratio = my_div / div;
                let mut feat = seen.feat.clone();
                if feat.len() != 1 {
                    return Err(self.err(iline, &field, "encoder loops read sequences of vectors"));
                }
                feat[0] *= ratio as usize;
                let view = if collected {
                    View::CollectedStepRows { ratio, reverse }
                } else {
                    View::StepRows { ratio, reverse }
                };
                Ok((view, TensorShape::new(Rows::One, feat)))
            }
            (Class::Encoder, Rows::Fixed(_)) => Err(self.err(
                iline,
                &field,
                "encoder loops cannot step through a fixed-length sequence",
            )),
            _ => Ok((
                if collected {
                    View::Collected
                } else {
                    View::Same
                },
                seen,
            )),
        }
    }
}
