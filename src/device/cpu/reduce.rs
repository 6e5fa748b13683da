//! Reductions in a fixed order that vectorises: element `i` of the 16-wide part goes into lane
//! `i mod 16`, the lanes are combined by a fixed pairwise tree (lane `l` with `l + 8`, then
//! `+ 4`, `+ 2`, `+ 1`), then the tail is added in order. The order depends only on the
//! length, never on the batch or the instruction set, so a request's result is the same bits
//! alone or batched, on any x86-64. Inline, for the callers' [`super::par::vectorized_fn!`]
//! bodies.

const L: usize = 16;

#[inline(always)]
fn tree(mut l: [f32; L], op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = L / 2;
    while w > 0 {
        for i in 0..w {
            l[i] = op(l[i], l[i + w]);
        }
        w /= 2;
    }
    l[0]
}

/// Folds `x` with `step` in the fixed order: lane by lane from `init`, the lanes combined by
/// `combine`'s tree, then the tail stepped in order.
#[inline(always)]
fn fold(
    x: &[f32],
    init: f32,
    step: impl Fn(f32, f32) -> f32,
    combine: impl Fn(f32, f32) -> f32,
) -> f32 {
    let mut lanes = [init; L];
    let mut chunks = x.chunks_exact(L);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l = step(*l, *v);
        }
    }
    chunks
        .remainder()
        .iter()
        .fold(tree(lanes, combine), |s, v| step(s, *v))
}

/// `Σ f(x[i])`.
#[inline(always)]
pub(crate) fn sum_of(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    fold(x, 0.0, |s, v| s + f(v), |a, b| a + b)
}

/// `Σ a[i]·b[i]`, each lane an FMA chain.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lanes = [0.0f32; L];
    let (ca, cb) = (a.chunks_exact(L), b.chunks_exact(L));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((l, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *l = x.mul_add(*y, *l);
        }
    }
    ra.iter()
        .zip(rb)
        .fold(tree(lanes, |a, b| a + b), |s, (x, y)| x.mul_add(*y, s))
}

/// The largest element (`f32::max`: NaN only if all are NaN); `-∞` when empty.
#[inline(always)]
pub(crate) fn max(x: &[f32]) -> f32 {
    fold(x, f32::NEG_INFINITY, f32::max, f32::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_match_their_definitions() {
        for n in [0, 1, 15, 16, 17, 100, 1000] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37) % 101) as f32 / 10.0 - 5.0)
                .collect();
            let y: Vec<f32> = (0..n)
                .map(|i| ((i * 53) % 89) as f32 / 20.0 - 2.0)
                .collect();
            let s: f64 = x.iter().map(|v| *v as f64).sum();
            let d: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
            assert!((sum_of(&x, |v| v) as f64 - s).abs() < 1e-3, "sum of {n}");
            assert!((dot(&x, &y) as f64 - d).abs() < 1e-3, "dot of {n}");
            let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max(&x), m, "max of {n}");
        }
    }
}
