//! The CPU device's kernels: plain f32 functions over slices, each with a naive reference in the
//! tests. GEMMs go through the `gemm` crate (AVX-512 where the CPU has it); everything else is
//! written out here. No kernel allocates.

use super::fastmath;
use gemm::Parallelism;
use std::cell::Cell;

thread_local! {
    static IN_GEMM: Cell<bool> = const { Cell::new(false) };
}

/// True while this thread is inside a call to the `gemm` crate or hands a GEMM's halves to
/// rayon's pool. The crate allocates its packing buffers inside some calls, and rayon's global
/// queue allocates a block now and then when a thread outside the pool injects work; the
/// steady-state allocation test uses this to tell those apart from allocations of lazybatch's
/// own serving path.
pub fn in_gemm() -> bool {
    IN_GEMM.with(|g| g.get())
}

/// Runs `f` marked as [`in_gemm`].
pub(crate) fn gemm_scope<R>(f: impl FnOnce() -> R) -> R {
    let was = IN_GEMM.with(|g| g.replace(true));
    let r = f();
    IN_GEMM.with(|g| g.set(was));
    r
}

/// GEMMs with at least this many multiply-adds use both cores.
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
    let par = if m * n * k >= PARALLEL_MACS {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    // SAFETY: the asserts above keep every index of the m×k, k×n and m×n views inside the
    // slices; `c` is borrowed mutably and cannot alias `a` or `b`.
    gemm_scope(|| unsafe {
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

/// `C[m×n] = A[m×k] · B` for row-major A and C, with `B` given by its (row, column) strides:
/// `(n, 1)`, stored `k × n`, or `(1, k)`, stored `n × k` (tied weights read transposed). Every
/// row of C is computed by the same arithmetic whatever `m` is ([`super::rowgemm`]), so a
/// request's outputs do not depend on the batch it runs in.
///
/// # Panics
/// On other strides, or operands too short.
pub fn gemm_rows(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    b_strides: (usize, usize),
    c: &mut [f32],
) {
    if b_strides == (1, k) {
        super::rowgemm::gemm_nt(m, n, k, a, b, c);
    } else {
        assert_eq!(b_strides, (n, 1), "gemm_rows: B stored k x n or n x k");
        super::rowgemm::gemm_nn((m, n, k), (a, k), (b, n), (c, n));
    }
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

/// Unfolds one group of a [C, H, W] image into `cols[K × P]`: row `(c·kh + ky)·kw + kx` holds
/// that tap's input for every output pixel (zero outside the image). Rows are built from
/// contiguous runs of the input, so this is much faster than the patch-per-row layout; the
/// GEMM reads it transposed (row stride 1, column stride P).
pub fn im2col_kp(
    x: &[f32],
    (h, w): (usize, usize),
    (c0, cg): (usize, usize),
    win: Window,
    cols: &mut [f32],
) {
    let ((kh, kw), stride, pad, (ho, wo)) = (win.kernel, win.stride, win.pad, win.out);
    let p = ho * wo;
    for c in 0..cg {
        let plane = &x[(c0 + c) * h * w..(c0 + c + 1) * h * w];
        for ky in 0..kh {
            for kx in 0..kw {
                let row =
                    &mut cols[((c * kh + ky) * kw + kx) * p..((c * kh + ky) * kw + kx + 1) * p];
                // output columns whose input column is inside the image
                let lo = pad.saturating_sub(kx).div_ceil(stride).min(wo);
                let hi = if w + pad > kx {
                    ((w + pad - kx - 1) / stride + 1).min(wo)
                } else {
                    0
                }
                .max(lo);
                for oy in 0..ho {
                    let dst = &mut row[oy * wo..(oy + 1) * wo];
                    let iy = (oy * stride + ky) as isize - pad as isize;
                    if iy < 0 || iy as usize >= h {
                        dst.iter_mut().for_each(|v| *v = 0.0);
                        continue;
                    }
                    let src = &plane[iy as usize * w..(iy as usize + 1) * w];
                    dst[..lo].iter_mut().for_each(|v| *v = 0.0);
                    dst[hi..].iter_mut().for_each(|v| *v = 0.0);
                    let ix0 = lo * stride + kx - pad;
                    if stride == 1 {
                        dst[lo..hi].copy_from_slice(&src[ix0..ix0 + (hi - lo)]);
                    } else {
                        for (j, d) in dst[lo..hi].iter_mut().enumerate() {
                            *d = src[ix0 + j * stride];
                        }
                    }
                }
            }
        }
    }
}

/// The output columns `lo..hi` whose input column `j·stride + kx − pad` lies inside a row of
/// `w`: the part of a window's tap that reads the image rather than padding.
#[inline]
fn tap_columns(w: usize, kx: usize, win: &Window) -> (usize, usize) {
    let (stride, pad, wo) = (win.stride, win.pad, win.out.1);
    let lo = pad.saturating_sub(kx).div_ceil(stride).min(wo);
    let hi = if w + pad > kx {
        ((w + pad - kx - 1) / stride + 1).min(wo)
    } else {
        0
    };
    (lo, hi.max(lo))
}

/// Calls `f(out_row, in_row_taps, ky, kx)` for every tap of every output row of one plane:
/// `in_row_taps(j)` is the input under output column `j` for that tap, over the columns
/// `lo..hi` that read the image. Rows whose input row is padding are skipped, as are columns
/// outside `lo..hi`. Taps run in (ky, kx) order, so every output element sums its taps in the
/// same order as a direct loop.
#[inline]
fn for_each_tap(
    plane: &[f32],
    (h, w): (usize, usize),
    win: &Window,
    out: &mut [f32],
    mut f: impl FnMut(&mut [f32], &[f32], usize, usize, usize),
) {
    let ((kh, kw), stride, pad, (ho, wo)) = (win.kernel, win.stride, win.pad, win.out);
    for oy in 0..ho {
        let orow = &mut out[oy * wo..(oy + 1) * wo];
        for ky in 0..kh {
            let iy = (oy * stride + ky) as isize - pad as isize;
            if iy < 0 || iy as usize >= h {
                continue;
            }
            let irow = &plane[iy as usize * w..(iy as usize + 1) * w];
            for kx in 0..kw {
                let (lo, hi) = tap_columns(w, kx, win);
                if lo < hi {
                    let first = lo * stride + kx - pad;
                    f(&mut orow[lo..hi], &irow[first..], stride, ky, kx);
                }
            }
        }
    }
}

/// Depthwise convolution (one filter per channel, multiplier 1) of a [C, H, W] image: each
/// tap is an `axpy` over a whole output row (contiguous at stride 1), summed in (ky, kx) order.
pub fn depthwise(
    x: &[f32],
    (c, h, w): (usize, usize, usize),
    wt: &[f32],
    win: Window,
    y: &mut [f32],
) {
    let ((kh, kw), (ho, wo)) = (win.kernel, win.out);
    for ch in 0..c {
        let plane = &x[ch * h * w..(ch + 1) * h * w];
        let f = &wt[ch * kh * kw..(ch + 1) * kh * kw];
        let out = &mut y[ch * ho * wo..(ch + 1) * ho * wo];
        out.iter_mut().for_each(|v| *v = 0.0);
        for_each_tap(plane, (h, w), &win, out, |o, i, stride, ky, kx| {
            let wv = f[ky * kw + kx];
            if stride == 1 {
                for (o, &i) in o.iter_mut().zip(i) {
                    *o += i * wv;
                }
            } else {
                for (j, o) in o.iter_mut().enumerate() {
                    *o += i[j * stride] * wv;
                }
            }
        });
    }
}

/// Max or average pooling of a [C, H, W] image (average counts only in-image elements). The
/// window is square (`kernel.0` used both ways). Max pooling runs tap by tap over whole output
/// rows; average pooling of the whole image (global) is one sum per channel.
pub fn pool(x: &[f32], (c, h, w): (usize, usize, usize), win: Window, max: bool, y: &mut [f32]) {
    let (k, (ho, wo)) = (win.kernel.0, win.out);
    let win = Window {
        kernel: (k, k),
        ..win
    };
    for ch in 0..c {
        let plane = &x[ch * h * w..(ch + 1) * h * w];
        let out = &mut y[ch * ho * wo..(ch + 1) * ho * wo];
        if max {
            out.iter_mut().for_each(|v| *v = f32::NEG_INFINITY);
            for_each_tap(plane, (h, w), &win, out, |o, i, stride, _, _| {
                for (j, o) in o.iter_mut().enumerate() {
                    *o = o.max(i[j * stride]);
                }
            });
        } else if (ho, wo) == (1, 1) && win.pad == 0 && k >= h.max(w) {
            out[0] = plane.iter().sum::<f32>() / plane.len().max(1) as f32;
        } else {
            out.iter_mut().for_each(|v| *v = 0.0);
            for_each_tap(plane, (h, w), &win, out, |o, i, stride, _, _| {
                for (j, o) in o.iter_mut().enumerate() {
                    *o += i[j * stride];
                }
            });
            divide_by_taps((h, w), &win, out);
        }
    }
}

/// Divides each output element by how many of its taps read the image (average pooling's
/// divisor: padding does not count), the product of its in-image rows and columns.
fn divide_by_taps((h, w): (usize, usize), win: &Window, out: &mut [f32]) {
    let ((kh, kw), stride, pad, (ho, wo)) = (win.kernel, win.stride, win.pad, win.out);
    let inside = |o: usize, k: usize, n: usize| {
        (0..k)
            .filter(|t| (o * stride + t).checked_sub(pad).is_some_and(|i| i < n))
            .count()
    };
    for oy in 0..ho {
        let rows = inside(oy, kh, h);
        for ox in 0..wo {
            let n = rows * inside(ox, kw, w);
            out[oy * wo + ox] /= n.max(1) as f32;
        }
    }
}

/// Activation kinds the kernels apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActK {
    /// None.
    None,
    /// max(x, 0).
    Relu,
    /// clamp(x, 0, 6).
    Relu6,
    /// tanh-approximated GELU.
    Gelu,
    /// tanh.
    Tanh,
    /// logistic.
    Sigmoid,
}

/// The logistic function.
#[inline]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + fastmath::exp(-x))
}

/// Applies an activation to one value.
#[inline]
pub(crate) fn act1(a: ActK, x: f32) -> f32 {
    match a {
        ActK::None => x,
        ActK::Relu => x.max(0.0),
        ActK::Relu6 => x.clamp(0.0, 6.0),
        ActK::Gelu => 0.5 * x * (1.0 + fastmath::tanh(0.797_884_6 * (x + 0.044_715 * x * x * x))),
        ActK::Tanh => fastmath::tanh(x),
        ActK::Sigmoid => sigmoid(x),
    }
}

/// Applies an activation in place.
pub fn act(a: ActK, x: &mut [f32]) {
    if a != ActK::None {
        map_act(a, x, |v| v);
    }
}

/// `x ← act(x · scale + shift)` in place (a convolution's folded batch norm and activation).
pub fn scale_shift_act(a: ActK, x: &mut [f32], scale: f32, shift: f32) {
    map_act(a, x, |v| v * scale + shift);
}

/// `x ← act(pre(x))`, one loop per activation kind so that each vectorises.
#[inline]
fn map_act(a: ActK, x: &mut [f32], pre: impl Fn(f32) -> f32 + Copy) {
    fn each(x: &mut [f32], f: impl Fn(f32) -> f32) {
        x.iter_mut().for_each(|v| *v = f(*v));
    }
    match a {
        ActK::None => each(x, pre),
        ActK::Relu => each(x, |v| act1(ActK::Relu, pre(v))),
        ActK::Relu6 => each(x, |v| act1(ActK::Relu6, pre(v))),
        ActK::Gelu => each(x, |v| act1(ActK::Gelu, pre(v))),
        ActK::Tanh => each(x, |v| act1(ActK::Tanh, pre(v))),
        ActK::Sigmoid => each(x, |v| act1(ActK::Sigmoid, pre(v))),
    }
}

/// Layer norm of one row in place: (x − mean) / sqrt(var + eps) · gamma + beta.
pub fn layernorm(x: &mut [f32], gamma: &[f32], beta: &[f32]) {
    let n = x.len() as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + 1e-5).sqrt();
    for ((v, g), b) in x.iter_mut().zip(gamma).zip(beta) {
        *v = (*v - mean) * inv * g + b;
    }
}

/// Softmax of one row in place (max-subtracted).
pub fn softmax(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0.0;
    for v in x.iter_mut() {
        *v = fastmath::exp(*v - m);
        s += *v;
    }
    let inv = 1.0 / s;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// LSTM pointwise update from the gate pre-activations `gates = [i, f, g, o]` (each `h` wide):
/// c = σ(f)·c + σ(i)·tanh(g); h = σ(o)·tanh(c).
pub fn lstm_cell(gates: &[f32], c: &mut [f32], h: &mut [f32]) {
    let n = c.len();
    for j in 0..n {
        let i = sigmoid(gates[j]);
        let f = sigmoid(gates[n + j]);
        let g = fastmath::tanh(gates[2 * n + j]);
        let o = sigmoid(gates[3 * n + j]);
        c[j] = f * c[j] + i * g;
        h[j] = o * fastmath::tanh(c[j]);
    }
}

/// Scaled dot-product attention of one query row for one head: `keys(j)` and `values(j)` give
/// the head's slice of key/value row j; `scores` is scratch of at least `nkeys`.
pub fn attend_dot<'a>(
    q: &[f32],
    nkeys: usize,
    keys: impl Fn(usize) -> &'a [f32],
    values: impl Fn(usize) -> &'a [f32],
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let s = &mut scores[..nkeys];
    for (j, sj) in s.iter_mut().enumerate() {
        *sj = q.iter().zip(keys(j)).map(|(a, b)| a * b).sum::<f32>() * scale;
    }
    softmax(s);
    out.iter_mut().for_each(|o| *o = 0.0);
    for (j, &p) in s.iter().enumerate() {
        for (o, v) in out.iter_mut().zip(values(j)) {
            *o += p * v;
        }
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
