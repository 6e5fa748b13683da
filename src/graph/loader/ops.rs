//! Reading one node's op: which fields each op takes ([`op_fields`]) and the op with its
//! parameters, every value checked.

use super::*;

pub(super) fn op_fields(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "input" => &["shape", "seq", "tokens"],
        "conv2d" => &[
            "out_channels",
            "kernel",
            "stride",
            "padding",
            "groups",
            "bias",
            "bn",
            "act",
        ],
        "pool" => &["kind", "kernel", "stride", "padding"],
        "flatten" | "concat" | "batchnorm" | "softmax" | "argmax" => &[],
        "layernorm" => &["eps"],
        "linear" => &["out_features", "bias", "act", "tied"],
        "add" => &["act"],
        "act" => &["kind"],
        "embedding" => &[
            "vocab",
            "dim",
            "scale",
            "positional",
            "positions",
            "token_types",
            "tied",
            "after_src",
        ],
        "lstm" => &["hidden", "reverse"],
        "attention" => &["mode", "heads"],
        "take" => &["row"],
        _ => return None,
    })
}

impl Parser<'_> {
    pub(super) fn parse_act(&self, t: &Table, key: &str, ctx: &str, line: usize) -> Result<Act> {
        match self.get_str(t, key, ctx, line)? {
            None => Ok(Act::None),
            Some(s) => Act::parse(&s).ok_or_else(|| {
                let l = self.field(t, key).map_or(line, |f| f.line);
                self.err(
                    l,
                    format!("{ctx}{key}"),
                    format!("unknown activation '{s}' (none, relu, relu6, gelu, gelu_erf, tanh, sigmoid)"),
                )
            }),
        }
    }

    /// A layer norm's `eps` (default 1e-5), in (0, 1).
    fn parse_eps(&self, t: &Table, ctx: &str, line: usize) -> Result<f32> {
        match self.get_float(t, "eps", ctx)? {
            None => Ok(1e-5),
            Some(e) if e < 1.0 && e as f32 > 0.0 => Ok(e as f32),
            Some(_) => {
                let l = self.field(t, "eps").map_or(line, |f| f.line);
                Err(self.err(l, format!("{ctx}eps"), "expected a number in (0, 1)"))
            }
        }
    }

    pub(super) fn parse_op(&self, raw: &RawNode, op_name: &str, ctx: &str) -> Result<Op> {
        let t = raw.table;
        let line = raw.line;
        let need = |k: &str| -> Result<usize> {
            self.get_uint(t, k, ctx)?.ok_or_else(|| {
                self.err(
                    line,
                    format!("{ctx}{k}"),
                    format!("required by op {op_name}"),
                )
            })
        };
        let b = |k: &str| -> Result<bool> { Ok(self.get_bool(t, k, ctx)?.unwrap_or(false)) };
        Ok(match op_name {
            "input" => self.parse_input(raw, ctx)?,
            "conv2d" => self.parse_conv2d(raw, ctx)?,
            "pool" => self.parse_pool(raw, ctx)?,
            "flatten" => Op::Flatten,
            "concat" => Op::Concat,
            "batchnorm" => Op::BatchNorm,
            "layernorm" => Op::LayerNorm {
                eps: self.parse_eps(t, ctx, line)?,
            },
            "softmax" => Op::Softmax,
            "argmax" => Op::Argmax,
            "linear" => Op::Linear {
                out_features: need("out_features")?,
                bias: b("bias")?,
                act: self.parse_act(t, "act", ctx, line)?,
                tied: self.get_str(t, "tied", ctx, line)?,
            },
            "add" => Op::Add {
                act: self.parse_act(t, "act", ctx, line)?,
            },
            "act" => {
                let a = self.parse_act(t, "kind", ctx, line)?;
                if a == Act::None && self.field(t, "kind").is_none() {
                    return Err(self.err(line, format!("{ctx}kind"), "required by op act"));
                }
                Op::Activation { kind: a }
            }
            "embedding" => self.parse_embedding(raw, ctx)?,
            "lstm" => Op::Lstm {
                hidden: need("hidden")?,
                reverse: b("reverse")?,
            },
            "attention" => self.parse_attention(raw, ctx)?,
            "take" => self.parse_take(raw, ctx)?,
            other => {
                return Err(Error::Internal(format!(
                    "op '{other}' passed the field check but has no reader"
                )))
            }
        })
    }

    /// Op `input` and its fields.
    fn parse_input(&self, raw: &RawNode, ctx: &str) -> Result<Op> {
        let t = raw.table;
        let line = raw.line;
        let b = |k: &str| -> Result<bool> { Ok(self.get_bool(t, k, ctx)?.unwrap_or(false)) };
        Ok({
            let f = self
                .field(t, "shape")
                .ok_or_else(|| self.err(line, format!("{ctx}shape"), "required by op input"))?;
            let shape = f
                .value
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|v| {
                            v.as_integer()
                                .filter(|&i| i > 0 && i <= MAX_DIM as i64)
                                .map(|i| i as usize)
                        })
                        .collect::<Option<Vec<_>>>()
                })
                .unwrap_or(None)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    self.err(
                        f.line,
                        format!("{ctx}shape"),
                        format!("expected a list of integers in [1, {MAX_DIM}]"),
                    )
                })?;
            let rows = match self.field(t, "seq") {
                None => Rows::One,
                Some(f) => match (f.value.as_str(), f.value.as_integer()) {
                    (Some("one"), _) => Rows::One,
                    (Some("src"), _) => Rows::Src { div: 1 },
                    (_, Some(n)) if n > 0 && n <= i64::from(MAX_STEPS) => Rows::Fixed(n as u32),
                    _ => {
                        return Err(self.err(
                            f.line,
                            format!("{ctx}seq"),
                            format!("expected \"one\", \"src\" or an integer in [1, {MAX_STEPS}]"),
                        ))
                    }
                },
            };
            Op::Input {
                shape,
                rows,
                tokens: b("tokens")?,
            }
        })
    }

    /// Op `conv2d` and its fields.
    fn parse_conv2d(&self, raw: &RawNode, ctx: &str) -> Result<Op> {
        let t = raw.table;
        let line = raw.line;
        let need = |k: &str| -> Result<usize> {
            self.get_uint(t, k, ctx)?
                .ok_or_else(|| self.err(line, format!("{ctx}{k}"), "required by op conv2d"))
        };
        let b = |k: &str| -> Result<bool> { Ok(self.get_bool(t, k, ctx)?.unwrap_or(false)) };
        Ok({
            let kernel = match self.field(t, "kernel") {
                None => {
                    return Err(self.err(line, format!("{ctx}kernel"), "required by op conv2d"))
                }
                Some(f) => match (f.value.as_integer(), f.value.as_array()) {
                    (Some(k), _) if k > 0 && k <= MAX_DIM as i64 => (k as usize, k as usize),
                    (_, Some(a)) if a.len() == 2 => {
                        let v: Vec<i64> = a.iter().filter_map(|x| x.as_integer()).collect();
                        let fits = |x: i64| x > 0 && x <= MAX_DIM as i64;
                        if v.len() != 2 || !fits(v[0]) || !fits(v[1]) {
                            return Err(self.err(
                                f.line,
                                format!("{ctx}kernel"),
                                format!("expected k or [kh, kw] in [1, {MAX_DIM}]"),
                            ));
                        }
                        (v[0] as usize, v[1] as usize)
                    }
                    _ => {
                        return Err(self.err(
                            f.line,
                            format!("{ctx}kernel"),
                            format!("expected k or [kh, kw] in [1, {MAX_DIM}]"),
                        ))
                    }
                },
            };
            Op::Conv2d {
                out_channels: need("out_channels")?,
                kernel,
                stride: self.get_uint(t, "stride", ctx)?.unwrap_or(1),
                padding: self.get_uint(t, "padding", ctx)?.unwrap_or(0),
                groups: self.get_uint(t, "groups", ctx)?.unwrap_or(1),
                bias: b("bias")?,
                bn: b("bn")?,
                act: self.parse_act(t, "act", ctx, line)?,
            }
        })
    }

    /// Op `pool` and its fields.
    fn parse_pool(&self, raw: &RawNode, ctx: &str) -> Result<Op> {
        let t = raw.table;
        let line = raw.line;
        let need = |k: &str| -> Result<usize> {
            self.get_uint(t, k, ctx)?
                .ok_or_else(|| self.err(line, format!("{ctx}{k}"), "required by op pool"))
        };
        Ok({
            let kind_s = self
                .get_str(t, "kind", ctx, line)?
                .ok_or_else(|| self.err(line, format!("{ctx}kind"), "required by op pool"))?;
            let kind = match kind_s.as_str() {
                "max" => PoolKind::Max,
                "avg" => PoolKind::Avg,
                "global_avg" => PoolKind::GlobalAvg,
                other => {
                    return Err(self.err(
                        self.field(t, "kind").map_or(line, |f| f.line),
                        format!("{ctx}kind"),
                        format!("unknown pool kind '{other}' (max, avg, global_avg)"),
                    ))
                }
            };
            let kernel = if kind == PoolKind::GlobalAvg {
                self.get_uint(t, "kernel", ctx)?.unwrap_or(1)
            } else {
                need("kernel")?
            };
            Op::Pool {
                kind,
                kernel,
                stride: self.get_uint(t, "stride", ctx)?.unwrap_or(kernel),
                padding: self.get_uint(t, "padding", ctx)?.unwrap_or(0),
            }
        })
    }

    /// Op `embedding` and its fields.
    fn parse_embedding(&self, raw: &RawNode, ctx: &str) -> Result<Op> {
        let t = raw.table;
        let line = raw.line;
        let need = |k: &str| -> Result<usize> {
            self.get_uint(t, k, ctx)?
                .ok_or_else(|| self.err(line, format!("{ctx}{k}"), "required by op embedding"))
        };
        let b = |k: &str| -> Result<bool> { Ok(self.get_bool(t, k, ctx)?.unwrap_or(false)) };
        Ok({
            let positional = match self.get_str(t, "positional", ctx, line)?.as_deref() {
                None | Some("none") => PosEnc::None,
                Some("sinusoidal") => PosEnc::Sinusoidal,
                Some("learned") => PosEnc::Learned,
                Some(o) => {
                    return Err(self.err(
                        self.field(t, "positional").map_or(line, |f| f.line),
                        format!("{ctx}positional"),
                        format!("unknown positional encoding '{o}' (none, sinusoidal, learned)"),
                    ))
                }
            };
            let positions = self.get_uint(t, "positions", ctx)?.unwrap_or(0);
            if positional == PosEnc::Learned && positions == 0 {
                return Err(self.err(
                    line,
                    format!("{ctx}positions"),
                    "required with positional = \"learned\"",
                ));
            }
            Op::Embedding {
                vocab: need("vocab")?,
                dim: need("dim")?,
                scale: b("scale")?,
                positional,
                positions,
                token_types: self.get_uint(t, "token_types", ctx)?.unwrap_or(0),
                tied: self.get_str(t, "tied", ctx, line)?,
                after_src: b("after_src")?,
            }
        })
    }

    /// Op `take` and its `row`: an index from the first row (0, 1, …) or, negative, from the
    /// last (-1 the last row, -2 the one before).
    fn parse_take(&self, raw: &RawNode, ctx: &str) -> Result<Op> {
        let Some(f) = self.field(raw.table, "row") else {
            return Ok(Op::Take {
                row: 0,
                from_end: false,
            });
        };
        match f.value.as_integer() {
            Some(r) if (0..=MAX_DIM as i64).contains(&r) => Ok(Op::Take {
                row: r as usize,
                from_end: false,
            }),
            Some(r) if (-(MAX_DIM as i64)..0).contains(&r) => Ok(Op::Take {
                row: (-r - 1) as usize,
                from_end: true,
            }),
            _ => Err(self.err(
                f.line,
                format!("{ctx}row"),
                format!(
                    "expected an integer in [-{MAX_DIM}, {MAX_DIM}] (negative: from the last row)"
                ),
            )),
        }
    }

    /// Op `attention` and its fields.
    fn parse_attention(&self, raw: &RawNode, ctx: &str) -> Result<Op> {
        let t = raw.table;
        let line = raw.line;
        Ok({
            let mode_s = self
                .get_str(t, "mode", ctx, line)?
                .ok_or_else(|| self.err(line, format!("{ctx}mode"), "required by op attention"))?;
            let mode = match mode_s.as_str() {
                "additive" => AttnMode::Additive,
                "dot" => AttnMode::Dot,
                "self" => AttnMode::SelfAttn,
                "causal" => AttnMode::Causal,
                "cross" => AttnMode::Cross,
                o => {
                    return Err(self.err(
                        self.field(t, "mode").map_or(line, |f| f.line),
                        format!("{ctx}mode"),
                        format!(
                            "unknown attention mode '{o}' (additive, dot, self, causal, cross)"
                        ),
                    ))
                }
            };
            Op::Attention {
                mode,
                heads: self.get_uint(t, "heads", ctx)?.unwrap_or(1),
            }
        })
    }
}
