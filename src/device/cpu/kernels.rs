//! The CPU device's kernels: plain f32 functions over slices, each with a naive reference in the
//! tests. Convolutions' GEMMs go through the `gemm` crate, linear and LSTM layers' through
//! [`super::rowgemm`]; everything else is written out here. No kernel allocates.

pub use super::activation::{act, ActK};
use super::activation::{shift_act, sigmoid};
use super::fastmath;
pub use super::panels::Panels;
pub use super::par::in_library;
use super::par::{library_scope, vectorized_fn};
use super::reduce;
use gemm::Parallelism;

/// GEMMs with at least this many multiply-adds use the `gemm` crate's threads (rayon's), unless
/// called from inside a share of a job the device already split.
const PARALLEL_MACS: usize = 1 << 22;

/// `C[m×n] = A[m×k] · B[k×n]`, each operand a slice with its (row, column) strides in elements;
/// `accumulate` adds to C instead of overwriting it.
///
/// # Panics
/// When a stride or size would index outside its slice (checked before the call).
pub fn gemm_strided(
    (m, n, k): (usize, usize, usize),
    (a, (a_rs, a_cs)): (&[f32], (usize, usize)),
    (b, (b_rs, b_cs)): (&[f32], (usize, usize)),
    (c, (c_rs, c_cs)): (&mut [f32], (usize, usize)),
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(
        k == 0 || last(m, k, a_rs, a_cs) < a.len(),
        "gemm: A out of bounds"
    );
    assert!(
        k == 0 || last(k, n, b_rs, b_cs) < b.len(),
        "gemm: B out of bounds"
    );
    assert!(last(m, n, c_rs, c_cs) < c.len(), "gemm: C out of bounds");
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    c[i * c_rs + j * c_cs] = 0.0;
                }
            }
        }
        return;
    }
    // a GEMM run inside a share of a larger job stays on its thread
    let threads = super::team::team().threads();
    let par = if threads > 1 && m * n * k >= PARALLEL_MACS && !super::par::in_share() {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: the asserts above keep every index of the m×k, k×n and m×n views inside the
    // slices; `c` is borrowed mutably and cannot alias `a` or `b`.
    library_scope(|| unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            c_cs as isize,
            c_rs as isize,
            accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            par,
        )
    });
}

/// `C[m×n] = A[m×k] · B` for row-major A and C and a layer's weights `B` (`k × n`) packed
/// beforehand ([`Panels::pack`], or [`Panels::pack_transposed`] for a tied table). Every row of
/// C is computed by the same arithmetic whatever `m` is ([`super::rowgemm`]), so a request's
/// outputs do not depend on the batch it runs in.
///
/// # Panics
/// When `a` or `c` is too short.
pub fn gemm_rows(m: usize, a: &[f32], b: &Panels, c: &mut [f32]) {
    super::rowgemm::gemm_panels((m, a, b.k), b, (c, b.n));
}

/// [`gemm_rows`] then [`bias_act`] (the same bits), the bias and the activation applied by the
/// GEMM to each block of C as it finishes it — in its registers for ReLU and ReLU6 from 8 rows
/// on — instead of a pass over C after it.
pub(crate) fn gemm_rows_bias_act(
    m: usize,
    a: &[f32],
    b: &Panels,
    c: &mut [f32],
    (bias, act): (&[f32], ActK),
) {
    let fin = super::rowgemm::Finish {
        shift: bias,
        act,
        stream: false,
    };
    super::rowgemm::gemm_panels_then((m, a, b.k), b, (c, b.n), fin, None);
}

/// Row-major `C[m×n] = A[m×k] · B[k×n]`.
pub fn matmul(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    gemm_strided((m, n, k), (a, (k, 1)), (b, (n, 1)), (c, (n, 1)), false);
}

/// A sliding window over an image: its size, stride and zero padding, and the output size they
/// give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Rows and columns of the window.
    pub kernel: (usize, usize),
    /// Step between windows, both directions.
    pub stride: usize,
    /// Zeros around the image, every side.
    pub pad: usize,
    /// Output rows and columns.
    pub out: (usize, usize),
}

impl Window {
    /// The input index under output `o`'s tap `tap` along one axis, if it lies inside a side
    /// of `n`.
    #[inline]
    pub(crate) fn tap(&self, o: usize, tap: usize, n: usize) -> Option<usize> {
        (o * self.stride + tap)
            .checked_sub(self.pad)
            .filter(|&i| i < n)
    }

    /// The taps `0..k` of output `o`'s window along one axis that lie inside a side of `n`.
    #[inline]
    pub(crate) fn taps_inside(&self, o: usize, k: usize, n: usize) -> std::ops::Range<usize> {
        let first = self.pad.saturating_sub(o * self.stride).min(k);
        let last = (n + self.pad)
            .saturating_sub(o * self.stride)
            .clamp(first, k);
        first..last
    }

    /// The output columns whose every tap lies inside an image `w` wide.
    #[inline]
    pub(crate) fn inner_columns(&self, w: usize) -> std::ops::Range<usize> {
        let (kw, s, pad, wo) = (self.kernel.1, self.stride, self.pad, self.out.1);
        let lo = pad.div_ceil(s).min(wo);
        let hi = ((w + pad).saturating_sub(kw) / s + 1).clamp(lo, wo);
        lo..hi
    }
}

/// `y ← act(y + bias)` over rows of `n` (a linear layer's or a channels-last convolution's
/// output; `bias` per column, empty: none), vectorised and split over the cores.
pub fn bias_act(a: ActK, y: &mut [f32], n: usize, bias: &[f32]) {
    if a == ActK::None && bias.is_empty() {
        return;
    }
    let work = y.len()
        * if matches!(a, ActK::Gelu | ActK::GeluErf | ActK::Tanh | ActK::Sigmoid) {
            16
        } else {
            1
        };
    super::par::split_rows(y, n, work, |_, rows| bias_act_rows(a, rows, n, bias));
}

vectorized_fn! {
    fn bias_act_rows(a: ActK, rows: &mut [f32], n: usize, bias: &[f32]) {
        for row in rows.chunks_exact_mut(n) {
            shift_act(a, row, bias);
        }
    }
}

/// `y ← act(a + b)`, split over the cores when long.
pub fn add_act(ak: ActK, a: &[f32], b: &[f32], y: &mut [f32]) {
    const CHUNK: usize = 4096;
    let n = y.len();
    super::par::split_rows(y, CHUNK.min(n.max(1)), n, |r0, out| {
        let at = r0 * CHUNK.min(n.max(1));
        add_act_run(ak, &a[at..at + out.len()], &b[at..at + out.len()], out)
    });
}

vectorized_fn! {
    fn add_act_run(ak: ActK, a: &[f32], b: &[f32], y: &mut [f32]) {
        y.iter_mut().zip(a).zip(b).for_each(|((y, a), b)| *y = a + b);
        act(ak, y);
    }
}

vectorized_fn! {
    /// Layer norm of one row in place: (x − mean) / sqrt(var + eps) · gamma + beta (sums in
    /// [`reduce`]'s fixed order).
    pub fn layernorm(x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
        let n = x.len() as f32;
        let mean = reduce::sum_of(x, |v| v) / n;
        let var = reduce::sum_of(x, |v| (v - mean) * (v - mean)) / n;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), b) in x.iter_mut().zip(gamma).zip(beta) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

/// Softmax of one row in place (max-subtracted; the exponentials vectorise, their sum in
/// [`reduce`]'s fixed order).
#[inline]
pub fn softmax(x: &mut [f32]) {
    let m = reduce::max(x);
    x.iter_mut().for_each(|v| *v = fastmath::exp(*v - m));
    let inv = 1.0 / reduce::sum_of(x, |v| v);
    for v in x.iter_mut() {
        *v *= inv;
    }
}

vectorized_fn! {
    /// The index of the first largest element (0 when the first is NaN, as a scan keeping the
    /// first strictly larger element would give).
    pub fn argmax(x: &[f32]) -> usize {
        if x.first().is_none_or(|v| v.is_nan()) {
            return 0;
        }
        let m = reduce::max(x);
        x.iter().position(|v| *v == m).unwrap_or(0)
    }
}

vectorized_fn! {
    /// LSTM pointwise update from the gate pre-activations `gates = [i, f, g, o]` (each `h`
    /// wide): c = σ(f)·c + σ(i)·tanh(g); h = σ(o)·tanh(c).
    pub fn lstm_cell(gates: &[f32], c: &mut [f32], h: &mut [f32]) {
        let n = c.len();
        let (gi, rest) = gates[..4 * n].split_at(n);
        let (gf, rest) = rest.split_at(n);
        let (gg, go) = rest.split_at(n);
        for j in 0..n {
            let i = sigmoid(gi[j]);
            let f = sigmoid(gf[j]);
            let g = fastmath::tanh(gg[j]);
            let o = sigmoid(go[j]);
            c[j] = f * c[j] + i * g;
            h[j] = o * fastmath::tanh(c[j]);
        }
    }
}

/// Rows of a buffer at a fixed stride: row `j` is `buf[first + j·stride..][..len]` (one head's
/// slice of key or value row `j`).
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    /// The buffer.
    pub buf: &'a [f32],
    /// Where row 0 starts.
    pub first: usize,
    /// Elements between rows.
    pub stride: usize,
}

impl Strided<'_> {
    #[inline(always)]
    fn row(&self, j: usize, len: usize) -> &[f32] {
        &self.buf[self.first + j * self.stride..][..len]
    }
}

vectorized_fn! {
    /// Scaled dot-product attention of one query row for one head over `nkeys` keys and values
    /// (`kv`): scores in [`reduce`]'s order, softmax, then the values summed in key order;
    /// `scores` is scratch of at least `nkeys`.
    pub fn attend_dot(
        q: &[f32],
        kv: (Strided<'_>, Strided<'_>, usize),
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        let (keys, values, nkeys) = kv;
        let dh = q.len();
        let s = &mut scores[..nkeys];
        for (j, sj) in s.iter_mut().enumerate() {
            *sj = reduce::dot(q, keys.row(j, dh)) * scale;
        }
        softmax(s);
        out.fill(0.0);
        for (j, &p) in s.iter().enumerate() {
            for (o, v) in out.iter_mut().zip(values.row(j, dh)) {
                *o += p * v;
            }
        }
    }
}

vectorized_fn! {
    /// [`attend_dot`] over two runs of keys and values, `first`'s then `then`'s, as one
    /// sequence (a decoder-only model's decode step: its prompt's keys, then its cache's).
    pub fn attend_dot_two(
        q: &[f32],
        kv: [(Strided<'_>, Strided<'_>, usize); 2],
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        let dh = q.len();
        let [first, then] = kv;
        let n = first.2 + then.2;
        let s = &mut scores[..n];
        let (sa, sb) = s.split_at_mut(first.2);
        for (j, sj) in sa.iter_mut().enumerate() {
            *sj = reduce::dot(q, first.0.row(j, dh)) * scale;
        }
        for (j, sj) in sb.iter_mut().enumerate() {
            *sj = reduce::dot(q, then.0.row(j, dh)) * scale;
        }
        softmax(s);
        out.fill(0.0);
        for (j, &p) in s.iter().enumerate() {
            let v = if j < first.2 {
                first.1.row(j, dh)
            } else {
                then.1.row(j - first.2, dh)
            };
            for (o, v) in out.iter_mut().zip(v) {
                *o += p * v;
            }
        }
    }
}

vectorized_fn! {
    /// One head of self-attention over `rows` rows of packed `Q|K|V` (`qkv` rows `3·d` wide;
    /// the head's columns `h0..h0 + dh` of each): `out[rows × dh] = softmax(Q·Kᵀ/√dh)·V`, with
    /// `scores` (`rows × rows`) as scratch; `causal`: row `r` attends to rows `0..=r` only.
    pub fn self_attention_head(
        qkv: (&[f32], usize),
        cols: (usize, usize),
        shape: (usize, bool),
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        let ((qkv, d), (h0, dh), (rows, causal)) = (qkv, cols, shape);
        let scale = 1.0 / (dh as f32).sqrt();
        gemm_strided(
            (rows, rows, dh),
            (&qkv[h0..], (3 * d, 1)),
            (&qkv[d + h0..], (1, 3 * d)),
            (scores, (rows, 1)),
            false,
        );
        for (r, row) in scores.chunks_exact_mut(rows).enumerate() {
            // masked: row r sees keys 0..=r, the later ones weigh nothing
            let seen = if causal { r + 1 } else { rows };
            let (row, masked) = row.split_at_mut(seen);
            row.iter_mut().for_each(|x| *x *= scale);
            softmax(row);
            masked.fill(0.0);
        }
        gemm_strided(
            (rows, dh, rows),
            (scores, (rows, 1)),
            (&qkv[2 * d + h0..], (3 * d, 1)),
            (out, (dh, 1)),
            false,
        );
    }
}

vectorized_fn! {
    /// Additive (Bahdanau) attention's score of one key: `Σ_t v[t]·tanh(key[t] + q[t] + b[t])`,
    /// the terms computed vectorised into `terms` (scratch of `q.len()`), then summed in order.
    pub fn additive_score(qk: (&[f32], &[f32]), vb: (&[f32], &[f32]), terms: &mut [f32]) -> f32 {
        let ((q, key), (v, b)) = (qk, vb);
        let terms = &mut terms[..q.len()];
        for (((tv, k), q), (v, b)) in terms.iter_mut().zip(key).zip(q).zip(v.iter().zip(b)) {
            *tv = v * fastmath::tanh(k + q + b);
        }
        terms.iter().sum()
    }
}

/// Sinusoidal positional encoding value for position `pos`, feature `i` of `d`.
#[inline]
pub fn sinusoid(pos: usize, i: usize, d: usize) -> f32 {
    let rate = 1.0 / 10000f32.powf((2 * (i / 2)) as f32 / d as f32);
    let a = pos as f32 * rate;
    if i.is_multiple_of(2) {
        a.sin()
    } else {
        a.cos()
    }
}
