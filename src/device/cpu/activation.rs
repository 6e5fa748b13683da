//! Activation functions, one value at a time ([`act1`]), over a slice in a loop that
//! vectorises as its caller is compiled ([`act`], [`shift_act`]), or in an AVX-512 register
//! ([`act_zmm`], ReLU and ReLU6): every kernel that activates (the GEMM's finish, the direct
//! convolution, convolution epilogues, the row-wise ops) applies these, so a value gets the same
//! bits whichever kernel activates it.

use super::fastmath;

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
    /// exact GELU (erf).
    GeluErf,
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
#[inline(always)]
fn act1(a: ActK, x: f32) -> f32 {
    match a {
        ActK::None => x,
        ActK::Relu => x.max(0.0),
        ActK::Relu6 => x.clamp(0.0, 6.0),
        ActK::Gelu => 0.5 * x * (1.0 + fastmath::tanh(0.797_884_6 * (x + 0.044_715 * x * x * x))),
        ActK::GeluErf => 0.5 * x * (1.0 + fastmath::erf(x * std::f32::consts::FRAC_1_SQRT_2)),
        ActK::Tanh => fastmath::tanh(x),
        ActK::Sigmoid => sigmoid(x),
    }
}

/// Applies an activation in place, one loop per kind so that each vectorises (inline, so that
/// a caller compiled for AVX-512 vectorises it 16 wide).
#[inline(always)]
pub fn act(a: ActK, x: &mut [f32]) {
    #[inline(always)]
    fn each(x: &mut [f32], f: impl Fn(f32) -> f32) {
        x.iter_mut().for_each(|v| *v = f(*v));
    }
    match a {
        ActK::None => {}
        ActK::Relu => each(x, |v| act1(ActK::Relu, v)),
        ActK::Relu6 => each(x, |v| act1(ActK::Relu6, v)),
        ActK::Gelu => each(x, |v| act1(ActK::Gelu, v)),
        ActK::GeluErf => each(x, |v| act1(ActK::GeluErf, v)),
        ActK::Tanh => each(x, |v| act1(ActK::Tanh, v)),
        ActK::Sigmoid => each(x, |v| act1(ActK::Sigmoid, v)),
    }
}

/// `row ← act(row + shift)` (`shift` per value, empty: none), inline so that it vectorises as
/// its caller is compiled: a layer's bias or folded batch norm, then its activation.
#[inline(always)]
pub(crate) fn shift_act(a: ActK, row: &mut [f32], shift: &[f32]) {
    if !shift.is_empty() {
        row.iter_mut().zip(shift).for_each(|(v, b)| *v += b);
    }
    act(a, row);
}

/// [`act`] on one AVX-512 vector for ReLU and ReLU6 (any other kind: `v` unchanged, for the
/// caller to apply in memory). `f32::max(x, 0)` and `f32::clamp(x, 0, 6)` exactly: MAXPS and
/// MINPS return their second operand when either is NaN or both are zeros, so NaN → 0 for
/// ReLU, NaN → NaN and −0 → −0 for ReLU6, as [`act1`] gives.
///
/// # Safety
/// AVX-512F present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn act_zmm(a: ActK, v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    match a {
        ActK::Relu => _mm512_max_ps(v, _mm512_setzero_ps()),
        ActK::Relu6 => _mm512_min_ps(_mm512_set1_ps(6.0), _mm512_max_ps(_mm512_setzero_ps(), v)),
        _ => v,
    }
}
