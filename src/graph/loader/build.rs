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

/// One input reference: the node, whether it reads the previous step (and the static node read
/// at step 0 instead, `x@prev|y`), and the line.
#[derive(Clone, Copy)]
struct Ref {
    node: NodeId,
    prev: bool,
    init: Option<NodeId>,
    line: usize,
}

/// What pass 2 finds for one node: its op, its input references, the (vocab, dim) of the
/// table a tied op reads, and the node whose parameters it shares.
struct Pending {
    op: Op,
    refs: Vec<Ref>,
    tied_table: Option<(usize, usize)>,
    shares: Option<NodeId>,
}

/// The name of node `id` (for messages).
fn raws_name<'r>(c: &Classified<'r>, id: NodeId) -> &'r str {
    c.by_name
        .iter()
        .find(|(_, v)| **v == id)
        .map_or("?", |(k, _)| k)
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
            mut seq,
        } = header;
        if let Some(s) = seq.as_mut() {
            // a static argmax chooses a token before the decoder loop: the prefill's first token
            s.prefill_token = nodes
                .iter()
                .any(|n| n.class == Class::Static && matches!(n.op, Op::Argmax));
            self.check_positions(s, &nodes, raws)?;
        }
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

    /// Every learned position table holds every position a request may reach: a static
    /// sequence's rows, a decoder step's (after the source's rows, with `after_src`).
    fn check_positions(&self, s: &SeqConfig, nodes: &[Node], raws: &[RawNode]) -> Result<()> {
        let tokens_max = |enc: u32| {
            let dec = s.max_dec;
            match s.max_context {
                Some(c) => c.saturating_sub(u32::from(s.prefill_token)).min(enc + dec),
                None => enc + dec,
            }
        };
        for n in nodes {
            let Op::Embedding {
                positional: PosEnc::Learned,
                positions,
                after_src,
                ..
            } = n.op
            else {
                continue;
            };
            let reach = match (n.loop_id, after_src) {
                (None, _) => n.out.rows.count(s.max_enc),
                (Some(_), false) => u64::from(s.max_dec),
                (Some(_), true) => u64::from(tokens_max(s.max_enc)),
            };
            if reach > positions as u64 {
                return Err(self.err(
                    raws[n.id.idx()].line,
                    format!("node '{}': positions", n.name),
                    format!(
                        "{positions} learned positions, but a request may reach position {} (seq2seq max_enc {}, max_dec {}, max_context {})",
                        reach - 1,
                        s.max_enc,
                        s.max_dec,
                        s.max_context.map_or("none".into(), |c| c.to_string())
                    ),
                ));
            }
        }
        Ok(())
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
            let shares = self.shares(c, &pend, i, raw, &ctx, &op)?;
            pend.push(Pending {
                op,
                refs,
                tied_table,
                shares,
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

    /// Input `iname` of node `i`: the node it names, and whether it reads the previous step
    /// (`x@prev`), and which static node at step 0 (`x@prev|y`).
    fn input_ref(
        &self,
        c: &Classified,
        i: usize,
        ctx: &str,
        iname: &str,
        iline: usize,
    ) -> Result<Ref> {
        let loop_id = c.classes[i].1;
        let field = format!("{ctx}inputs");
        let (iname, init) = match iname.split_once('|') {
            Some((x, y)) => (x, Some(y)),
            None => (iname, None),
        };
        let (base, prev) = match iname.strip_suffix("@prev") {
            Some(b) => (b, true),
            None => (iname, false),
        };
        let pid = *c
            .by_name
            .get(base)
            .ok_or_else(|| self.err(iline, &field, format!("unknown node '{base}'")))?;
        let (pclass, ploop) = c.classes[pid.idx()];
        let init = match init {
            None => None,
            Some(_) if !prev => {
                return Err(self.err(
                    iline,
                    &field,
                    format!("'{iname}|…': only an @prev input names what step 0 reads instead"),
                ))
            }
            Some(y) => {
                let yid = *c
                    .by_name
                    .get(y)
                    .ok_or_else(|| self.err(iline, &field, format!("unknown node '{y}'")))?;
                if yid.idx() >= i || c.classes[yid.idx()].0 != Class::Static {
                    return Err(self.err(
                        iline,
                        &field,
                        format!("'{y}', what step 0 reads instead of {iname}, must be an earlier static node"),
                    ));
                }
                Some(yid)
            }
        };
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
        Ok(Ref {
            node: pid,
            prev,
            init,
            line: iline,
        })
    }

    /// The earlier node whose parameters node `i` uses (its `shares` field), checked to be of
    /// the same op with parameters of the same sizes and to own its parameters.
    fn shares(
        &self,
        c: &Classified,
        pend: &[Pending],
        i: usize,
        raw: &RawNode,
        ctx: &str,
        op: &Op,
    ) -> Result<Option<NodeId>> {
        let Some(name) = self.get_str(raw.table, "shares", ctx, raw.line)? else {
            return Ok(None);
        };
        let line = self.field(raw.table, "shares").map_or(raw.line, |f| f.line);
        let field = format!("{ctx}shares");
        let owner = c
            .by_name
            .get(name.as_str())
            .filter(|id| id.idx() < i)
            .ok_or_else(|| self.err(line, &field, format!("'{name}' is not an earlier node")))?;
        let o = &pend[owner.idx()];
        if o.shares.is_some() {
            return Err(self.err(
                line,
                &field,
                format!("'{name}' shares another node's parameters itself: name their owner"),
            ));
        }
        if let Some(why) = op.share_mismatch(&o.op) {
            return Err(self.err(line, &field, format!("'{name}': {why}")));
        }
        Ok(Some(*owner))
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
            let (Some(out), Some((inputs, in_shapes, mut cost))) =
                (outs[i].clone(), done[i].take())
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
                    AttnMode::SelfAttn if class == Class::Decoder && in_shapes.len() == 2 => {
                        Keys::PrefixCache(in_shapes[1].rows)
                    }
                    AttnMode::SelfAttn if class == Class::Decoder => Keys::Cache,
                    AttnMode::SelfAttn => Keys::OwnRows,
                    AttnMode::Causal => Keys::Causal,
                    AttnMode::Additive | AttnMode::Dot | AttnMode::Cross => {
                        Keys::Seq(in_shapes[1].rows)
                    }
                },
                _ => Keys::None,
            };
            let shares = pend[i].shares;
            if let Some(o) = shares {
                // the same parameter sizes: the same input and output widths as the owner
                let (owner, width) = (&nodes[o.idx()], |s: &[TensorShape]| {
                    s.iter().map(|t| numel(&t.feat)).sum::<u64>()
                });
                if width(&owner.in_shapes) != width(&in_shapes) || owner.out.feat != out.feat {
                    return Err(self.err(
                        raw.line,
                        format!("node '{}': shares", raw.name),
                        format!(
                            "'{}' maps {} values to {:?}, this node {} to {:?}: parameters of other sizes",
                            owner.name,
                            width(&owner.in_shapes),
                            owner.out.feat,
                            width(&in_shapes),
                            out.feat
                        ),
                    ));
                }
                cost.params = 0;
            }
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
                shares,
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
        for &r in &p.refs {
            let Some(pshape) = outs[r.node.idx()].clone() else {
                *done = None;
                return Ok(if loop_id.is_some() {
                    op_implied_row(&p.op).map(|f| TensorShape::new(Rows::One, f))
                } else {
                    None
                });
            };
            let init = r.init.map(|y| (y, outs[y.idx()].clone()));
            let (view, shape) = self.input_view(c, i, &p.op, (r, init), pshape, &ctx)?;
            inputs.push(Input { node: r.node, view });
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
        (r, init): (Ref, Option<(NodeId, Option<TensorShape>)>),
        pshape: TensorShape,
        ctx: &str,
    ) -> Result<(View, TensorShape)> {
        let (pid, iline) = (r.node, r.line);
        let (class, loop_id) = c.classes[i];
        let (_, ploop) = c.classes[pid.idx()];
        match (r.prev, init) {
            (true, None) => return Ok((View::Prev, pshape)),
            (true, Some((y, yshape))) => {
                // step 0's value must look like every later step's
                let want = TensorShape::new(Rows::One, pshape.feat.clone());
                if yshape.as_ref().is_some_and(|s| *s != want) {
                    return Err(self.err(
                        iline,
                        format!("{ctx}inputs"),
                        format!(
                            "step 0 reads '{}' instead of '{}': it must be one row of {:?}, like a step's value",
                            raws_name(c, y),
                            raws_name(c, pid),
                            pshape.feat
                        ),
                    ));
                }
                return Ok((View::PrevOr(y), pshape));
            }
            (false, _) => {}
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
