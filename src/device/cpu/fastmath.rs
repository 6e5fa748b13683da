//! `exp`, `tanh` and `erf` for the CPU kernels' activations, written so that a loop over a slice
//! vectorises (no calls into libm, no data-dependent branches: both sides are computed and one
//! is selected). BERT's GELU spent most of its time in scalar `tanhf`.
//!
//! * [`exp`]: Cody–Waite range reduction `x = n·ln 2 + r`, `|r| ≤ ln 2 / 2`, with `ln 2` split
//!   into a part exact in few bits and a correction, then the Taylor polynomial of `e^r` to
//!   degree 7 (truncation below `0.347⁸/8! ≈ 5.3e-9`), scaled by `2ⁿ` through the exponent
//!   bits. Inputs are clamped to `[-87.3, 88.3]` (so that `2ⁿ` stays a normal `f32`).
//! * [`tanh`]: the odd Taylor polynomial to degree 15 for `|x| < 0.625`, where
//!   `1 − 2/(e^{2|x|} + 1)` would lose bits to cancellation, and that form above, saturating to
//!   ±1 from `|x| ≥ 9.1` (where `tanh` rounds to 1 in `f32`).
//! * [`erf`]: Abramowitz & Stegun's 7.1.26, `1 − (a₁t + … + a₅t⁵)·e^{−x²}` with
//!   `t = 1/(1 + 0.3275911·|x|)` (absolute error ≤ 1.5e-7 in exact arithmetic), for the exact
//!   GELU of imported models.
//!
//! Measured against libm (f64) over a dense sweep, which the tests bound: `exp` within 9.8e-8
//! relative (bound 2e-7), `tanh` within 2.2e-7 absolute (bound 4e-7) and 3.9e-7 relative
//! where `|tanh| ≥ 1e-3` (bound 6e-7); `erf` within 4.0e-7 absolute of its Maclaurin series in
//! f64 over [0, 3.5] (bound 5e-7; the Maclaurin series itself below |x| = 0.5).

/// `e^x`.
#[inline]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 = LN2_HI + LN2_LO, LN2_HI with 9 significant bits so that n·LN2_HI is exact
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.3, 88.3);
    // n = round(x·log2 e), ties to even, by adding 1.5·2²³: the sum's low mantissa bits are
    // then n itself (|n| ≤ 127), read below without a float-to-int conversion, whose
    // saturating semantics would not vectorise (nor would `round`, a libm call)
    const MAGIC: f32 = 12_582_912.0;
    let t = x * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Σ r^k / k!, k = 0..=7, by Horner
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // 2ⁿ: the exponent field n + 127 (MAGIC's bits are 0x4B40_0000 + 0)
    let scale = f32::from_bits(t.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23);
    p * scale
}

/// `erf(x)` (see the module doc for the error bound).
#[inline]
pub fn erf(x: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26: 1 − (a₁t + … + a₅t⁵)·e^{−x²}, t = 1/(1 + p|x|), absolute
    // error ≤ 1.5e-7 (plus `exp`'s); odd in x
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_7,
        -1.453_152_1,
        1.061_405_4,
    ];
    let a = x.abs().min(9.0);
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let big = 1.0 - poly * exp(-a * a);
    // small: the Maclaurin series to x¹³ (next term below 4e-10 for |x| < 0.5), where the
    // form above would cancel
    let s = a * a;
    let small = std::f32::consts::FRAC_2_SQRT_PI
        * a
        * (1.0
            + s * (-1.0 / 3.0
                + s * (1.0 / 10.0
                    + s * (-1.0 / 42.0
                        + s * (1.0 / 216.0 + s * (-1.0 / 1320.0 + s * (1.0 / 9360.0)))))));
    let y = if a < 0.5 { small } else { big };
    if x.is_nan() {
        x
    } else {
        y.copysign(x)
    }
}

/// `tanh(x)`.
#[inline]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs().min(9.1);
    // large: 1 − 2/(e^{2a} + 1)
    let big = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    // small: a − a³/3 + 2a⁵/15 − 17a⁷/315 + 62a⁹/2835 − 1382a¹¹/155925 + 21844a¹³/6081075
    // − 929569a¹⁵/638512875
    let s = a * a;
    let small = a
        * (1.0
            + s * (-1.0 / 3.0
                + s * (2.0 / 15.0
                    + s * (-17.0 / 315.0
                        + s * (62.0 / 2835.0
                            + s * (-1382.0 / 155_925.0
                                + s * (21_844.0 / 6_081_075.0
                                    + s * (-929_569.0 / 638_512_875.0))))))));
    let t = if a < 0.625 { small } else { big };
    // NaN stays NaN (`min` above would have turned it into 9.1)
    if x.is_nan() {
        x
    } else {
        t.copysign(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `step`-th f32 from `lo` to `hi` (by value), both signs.
    fn sweep(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).flat_map(move |i| {
            let x = lo + (hi - lo) * i as f32 / n as f32;
            [x, -x]
        })
    }

    #[test]
    fn exp_is_within_its_bound_of_libm() {
        let mut worst = 0.0f64;
        for x in sweep(0.0, 88.0, 400_000) {
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            if want > 1e-37 {
                worst = worst.max((got / want - 1.0).abs());
            }
        }
        eprintln!("exp: worst relative error {worst:e}");
        assert!(worst < 2e-7, "exp: worst relative error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-200.0) < 1e-37 && exp(-200.0) >= 0.0);
        assert!(exp(200.0).is_finite());
    }

    #[test]
    fn tanh_is_within_its_bound_of_libm() {
        let (mut abs, mut rel) = (0.0f64, 0.0f64);
        for x in sweep(0.0, 12.0, 1_200_000).chain(sweep(0.0, 1e-3, 10_000)) {
            let want = f64::from(x).tanh();
            let got = f64::from(tanh(x));
            abs = abs.max((got - want).abs());
            if want.abs() >= 1e-3 {
                rel = rel.max((got / want - 1.0).abs());
            }
        }
        eprintln!("tanh: worst abs {abs:e}, rel {rel:e}");
        assert!(abs < 4e-7 && rel < 6e-7, "tanh: abs {abs:e}, rel {rel:e}");
        assert_eq!(tanh(0.0), 0.0);
        assert_eq!((tanh(30.0), tanh(-30.0)), (1.0, -1.0));
        assert!(tanh(f32::NAN).is_nan());
    }

    #[test]
    fn erf_is_within_its_bound_of_the_series() {
        // erf x = 2/√π Σ (−1)ⁿ x^{2n+1} / (n! (2n+1)), exact enough in f64 for |x| ≤ 3.5
        fn series(x: f64) -> f64 {
            let (mut term, mut sum, mut n) = (x, 0.0f64, 0.0f64);
            while term.abs() > 1e-18 * sum.abs().max(1e-300) || n < 3.0 {
                sum += term / (2.0 * n + 1.0);
                n += 1.0;
                term *= -x * x / n;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        }
        let mut abs = 0.0f64;
        for x in sweep(0.0, 3.5, 350_000) {
            abs = abs.max((f64::from(erf(x)) - series(f64::from(x))).abs());
            assert_eq!(erf(-x), -erf(x));
        }
        eprintln!("erf: worst abs {abs:e}");
        assert!(abs < 5e-7, "erf: abs {abs:e}");
        assert!((erf(3.5) - 1.0).abs() < 1e-6 && erf(20.0) == 1.0);
        assert!(erf(f32::NAN).is_nan());
    }
}
