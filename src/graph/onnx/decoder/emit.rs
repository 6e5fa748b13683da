//! The recognized decoder written out as a model file: the prefill (static nodes) and the
//! decode loop sharing its parameters, as `models/gpt2.toml` has them, with the export's
//! weights by node name.

use super::{Layer, Linear, Norm, Sizes};
use crate::graph::weights::Weights;
use std::fmt::Write as _;

/// Writes the model file: the prefill (static nodes) and the decode loop sharing its
/// parameters, as `models/gpt2.toml` has them, with the export's weights.
pub(super) fn emit(
    stem: &str,
    about: &str,
    s: Sizes,
    (table, positions): (Vec<f32>, Vec<f32>),
    layers: &[Layer],
    (ln_f, untied_logits): (Norm, Option<Vec<f32>>),
) -> (String, Vec<(String, Weights)>) {
    let q = |v: &str| crate::graph::onnx::quote(v);
    let p = s.positions as u32;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# imported from a decoder-only ONNX export with a key/value cache"
    );
    let _ = writeln!(t, "name = {}", q(stem));
    let _ = writeln!(
        t,
        "description = {}",
        q(&format!(
            "{about}: decoder-only, {} layers, width {}, {} heads, vocabulary {}, {} positions",
            s.layers, s.width, s.heads, s.vocab, s.positions
        ))
    );
    let _ = writeln!(t, "source = {}\nmax_batch = 64\n", q(stem));
    // GPT-2's reference lengths (models/gpt2.toml), within the context
    let _ = writeln!(
        t,
        "[seq2seq]\nlengths = \"azure-conv-2023\"\nref_enc = {}\nref_dec = {}\nmax_enc = {}\nmax_dec = {}\nmax_context = {p}",
        388.min(p / 2),
        94.min(p / 4),
        p - 2,
        p - 2
    );
    let mut w: Vec<(String, Weights)> = Vec::new();
    let node = |t: &mut String, name: &str, op: &str, inputs: &[&str], extra: &str| {
        let ins: Vec<String> = inputs.iter().map(|i| q(i)).collect();
        let _ = writeln!(t, "\n[[node]]\nname = {}\nop = \"{op}\"", q(name));
        if !inputs.is_empty() {
            let _ = writeln!(t, "inputs = [{}]", ins.join(", "));
        }
        t.push_str(extra);
    };
    let (v, d, h) = (s.vocab, s.width, s.heads);
    node(
        &mut t,
        "prompt",
        "input",
        &[],
        "shape = [1]\nseq = \"src\"\ntokens = true\n",
    );
    let table_fields =
        format!("vocab = {v}\ndim = {d}\npositional = \"learned\"\npositions = {p}\n");
    node(&mut t, "wte", "embedding", &["prompt"], &table_fields);
    w.push((
        "wte".into(),
        Weights {
            w: table,
            extra: positions,
            ..Weights::default()
        },
    ));
    let lin = |l: &Linear| Weights {
        w: l.w.clone(),
        bias: l.bias.clone(),
        ..Weights::default()
    };
    let norm = |n: &Norm| Weights {
        scale: n.scale.clone(),
        shift: n.shift.clone(),
        ..Weights::default()
    };
    let mut x = "wte".to_string();
    for (i, l) in layers.iter().enumerate() {
        let n = |part: &str| format!("p{i}.{part}");
        let eps = |e: f32| format!("eps = {e:e}\n");
        node(&mut t, &n("ln1"), "layernorm", &[&x], &eps(l.ln1.eps));
        node(
            &mut t,
            &n("qkv"),
            "linear",
            &[&n("ln1")],
            &format!("out_features = {}\nbias = true\n", 3 * d),
        );
        node(
            &mut t,
            &n("attn"),
            "attention",
            &[&n("qkv")],
            &format!("mode = \"causal\"\nheads = {h}\n"),
        );
        node(
            &mut t,
            &n("proj"),
            "linear",
            &[&n("attn")],
            &format!("out_features = {d}\nbias = true\n"),
        );
        node(&mut t, &n("res1"), "add", &[&n("proj"), &x], "");
        node(
            &mut t,
            &n("ln2"),
            "layernorm",
            &[&n("res1")],
            &eps(l.ln2.eps),
        );
        let fc = format!(
            "out_features = {}\nbias = true\nact = \"{}\"\n",
            l.fc.n, l.act
        );
        node(&mut t, &n("fc"), "linear", &[&n("ln2")], &fc);
        node(
            &mut t,
            &n("fc_proj"),
            "linear",
            &[&n("fc")],
            &format!("out_features = {d}\nbias = true\n"),
        );
        node(&mut t, &n("res2"), "add", &[&n("fc_proj"), &n("res1")], "");
        w.extend([
            (n("ln1"), norm(&l.ln1)),
            (n("qkv"), lin(&l.qkv)),
            (n("proj"), lin(&l.proj)),
            (n("ln2"), norm(&l.ln2)),
            (n("fc"), lin(&l.fc)),
            (n("fc_proj"), lin(&l.fc_proj)),
        ]);
        x = n("res2");
    }
    node(&mut t, "last", "take", &[&x], "row = -1\n");
    node(
        &mut t,
        "ln_f",
        "layernorm",
        &["last"],
        &format!("eps = {:e}\n", ln_f.eps),
    );
    w.push(("ln_f".into(), norm(&ln_f)));
    let logits = match &untied_logits {
        None => format!("out_features = {v}\ntied = \"wte\"\n"),
        Some(_) => format!("out_features = {v}\n"),
    };
    node(&mut t, "first_logits", "linear", &["ln_f"], &logits);
    if let Some(lm) = untied_logits {
        w.push((
            "first_logits".into(),
            Weights {
                w: lm,
                ..Weights::default()
            },
        ));
    }
    node(&mut t, "first_token", "argmax", &["first_logits"], "");
    let dec = |extra: &str| format!("class = \"decoder\"\n{extra}");
    node(
        &mut t,
        "tok",
        "embedding",
        &["next_token@prev|first_token"],
        &dec(&format!(
            "shares = \"wte\"\n{table_fields}after_src = true\n"
        )),
    );
    let mut x = "tok".to_string();
    for (i, l) in layers.iter().enumerate() {
        let (n, o) = (
            |part: &str| format!("d{i}.{part}"),
            |part: &str| format!("p{i}.{part}"),
        );
        let shared = |part: &str, extra: &str| dec(&format!("shares = \"{}\"\n{extra}", o(part)));
        let eps = |e: f32| format!("eps = {e:e}\n");
        node(
            &mut t,
            &n("ln1"),
            "layernorm",
            &[&x],
            &shared("ln1", &eps(l.ln1.eps)),
        );
        node(
            &mut t,
            &n("qkv"),
            "linear",
            &[&n("ln1")],
            &shared("qkv", &format!("out_features = {}\nbias = true\n", 3 * d)),
        );
        node(
            &mut t,
            &n("attn"),
            "attention",
            &[&n("qkv"), &o("qkv")],
            &dec(&format!("mode = \"self\"\nheads = {h}\n")),
        );
        node(
            &mut t,
            &n("proj"),
            "linear",
            &[&n("attn")],
            &shared("proj", &format!("out_features = {d}\nbias = true\n")),
        );
        node(&mut t, &n("res1"), "add", &[&n("proj"), &x], &dec(""));
        node(
            &mut t,
            &n("ln2"),
            "layernorm",
            &[&n("res1")],
            &shared("ln2", &eps(l.ln2.eps)),
        );
        let fc = format!(
            "out_features = {}\nbias = true\nact = \"{}\"\n",
            l.fc.n, l.act
        );
        node(&mut t, &n("fc"), "linear", &[&n("ln2")], &shared("fc", &fc));
        node(
            &mut t,
            &n("fc_proj"),
            "linear",
            &[&n("fc")],
            &shared("fc_proj", &format!("out_features = {d}\nbias = true\n")),
        );
        node(
            &mut t,
            &n("res2"),
            "add",
            &[&n("fc_proj"), &n("res1")],
            &dec(""),
        );
        x = n("res2");
    }
    node(
        &mut t,
        "dec_ln_f",
        "layernorm",
        &[&x],
        &dec(&format!("shares = \"ln_f\"\neps = {:e}\n", ln_f.eps)),
    );
    let logits = if logits.contains("tied") {
        dec(&logits)
    } else {
        dec(&format!("shares = \"first_logits\"\n{logits}"))
    };
    node(&mut t, "logits", "linear", &["dec_ln_f"], &logits);
    node(&mut t, "next_token", "argmax", &["logits"], &dec(""));
    (t, w)
}
