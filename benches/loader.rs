//! Model-file loading against its floor (a harness that prints a table; run with
//! `cargo bench --bench loader`): a chain of N `linear`/`act` nodes read by lazybatch's loader
//! (TOML, names, shapes, costs, line numbers for errors) beside `toml_edit` parsing the same
//! text alone. Linear loading shows as a constant time per node as N grows 100-fold.

use lazybatch::graph::loader::parse_model;
use std::path::Path;
use std::time::Instant;

/// A model file of `n` nodes after the input: alternating linear layers and activations.
fn chain(n: usize) -> String {
    let mut s = String::from(
        "name = \"chain\"\nmax_batch = 8\n[[node]]\nname = \"n0\"\nop = \"input\"\nshape = [16]\n",
    );
    for i in 1..=n {
        if i % 2 == 1 {
            s.push_str(&format!(
                "[[node]]\nname = \"n{i}\"\nop = \"linear\"\nout_features = 16\ninputs = [\"n{}\"]\n",
                i - 1
            ));
        } else {
            s.push_str(&format!(
                "[[node]]\nname = \"n{i}\"\nop = \"act\"\nkind = \"relu\"\ninputs = [\"n{}\"]\n",
                i - 1
            ));
        }
    }
    s
}

/// The best of `reps` timings of `f`, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    println!("Model-file loading (best of 3), lazybatch's loader against toml_edit's parse alone:");
    println!(
        "{:>8} {:>10} {:>12} {:>12} {:>14} {:>14} {:>8}",
        "nodes", "MB", "load (s)", "toml (s)", "load µs/node", "toml µs/node", "ratio"
    );
    for n in [1_000usize, 10_000, 100_000] {
        let text = chain(n);
        let load = best(3, || {
            let m = parse_model(&text, Path::new("chain.toml")).expect("the chain loads");
            assert_eq!(m.nodes.len(), n + 1);
        });
        let toml = best(3, || {
            let d = toml_edit::ImDocument::parse(text.as_str()).expect("valid TOML");
            assert!(d.as_table().contains_key("node"));
        });
        println!(
            "{:>8} {:>10.2} {:>12.4} {:>12.4} {:>14.2} {:>14.2} {:>8.2}",
            n,
            text.len() as f64 / 1e6,
            load,
            toml,
            load * 1e6 / n as f64,
            toml * 1e6 / n as f64,
            load / toml
        );
    }
}
