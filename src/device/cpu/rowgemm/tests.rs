//! The row GEMM's tests: batch invariance, the SIMD and portable kernels bit for bit, the epilogue.

use super::*;

fn data(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i + seed) * 7919) % 1999) as f32 / 1999.0 - 0.5)
        .collect()
}

/// Every element against an f64 reference, and every row bit-identical to the same row
/// computed alone, for shapes that cover each block size and column tail.
#[test]
fn rows_are_the_same_bits_alone_or_in_any_batch() {
    for &(m, n, k) in &[
        (1, 300, 37),
        (7, 45, 64),
        (13, 33, 100),
        (64, 520, 129),
        (9, 17, 1),
        (20, 1100, 300),
        // rows 4 KiB apart: A's blocks copied before the micro-kernel reads them
        (70, 40, 1024),
    ] {
        let (a, b) = (data(m * k, 1), data(k * n, 2));
        let mut c = vec![0.0; m * n];
        gemm_nn((m, n, k), (&a, k), (&b, n), (&mut c, n));
        // weights packed beforehand: the same bits as the plain matrix
        let pk = Panels::pack(&b, k, n);
        let mut cp = vec![0.0; m * n];
        gemm_panels((m, &a, k), &pk, (&mut cp, n));
        assert_eq!(cp, c, "panels {m}x{n}x{k}");
        for i in 0..m {
            let mut alone = vec![0.0; n];
            gemm_nn((1, n, k), (&a[i * k..], k), (&b, n), (&mut alone, n));
            assert_eq!(alone, c[i * n..(i + 1) * n], "nn row {i} of {m}x{n}x{k}");
            gemm_panels((1, &a[i * k..], k), &pk, (&mut alone, n));
            assert_eq!(
                alone,
                c[i * n..(i + 1) * n],
                "panels row {i} of {m}x{n}x{k}"
            );
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
                let got = c[i * n + j];
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "({i}, {j}) of {m}x{n}x{k}: {got} vs {want}"
                );
            }
        }
    }
}

/// The epilogue sees every element of C exactly once, already final (the value
/// `gemm_panels` computes), on every path: few rows, many rows, several blocks of `p` and
/// of columns, split over the threads or not.
#[test]
fn the_epilogue_gets_each_final_element_once() {
    use std::sync::atomic::{AtomicU32, Ordering};
    for &(m, n, k) in &[
        (1, 70, 5),
        (5, 300, 37),
        (8, 64, 64),
        (100, 1100, 300),
        (300, 256, 64),
    ] {
        let (a, b) = (data(m * k, 5), data(k * n, 6));
        let pk = Panels::pack(&b, k, n);
        let mut want = vec![0.0; m * n];
        gemm_panels((m, &a, k), &pk, (&mut want, n));
        let seen: Vec<AtomicU32> = (0..m * n).map(|_| AtomicU32::new(0)).collect();
        let epi = |mut d: Done| {
            for r in d.rows.clone() {
                let j0 = d.cols.start;
                for (j, v) in d.row(r).iter_mut().enumerate() {
                    assert_eq!(*v, want[r * n + j0 + j], "({r}, {}) of {m}x{n}x{k}", j0 + j);
                    seen[r * n + j0 + j].fetch_add(1, Ordering::Relaxed);
                    *v = -1.0;
                }
            }
        };
        let mut c = vec![0.0; m * n];
        gemm_panels_then((m, &a, k), &pk, (&mut c, n), Finish::NONE, Some(&epi));
        assert!(
            seen.iter().all(|s| s.load(Ordering::Relaxed) == 1),
            "{m}x{n}x{k}"
        );
        assert!(c.iter().all(|&v| v == -1.0), "{m}x{n}x{k}");
    }
}

/// The AVX-512 kernels and the portable ones give the same bits (an FMA is exactly rounded),
/// through each path: streaming (few rows) and packed (many rows, several blocks of `p`).
#[test]
fn the_simd_and_portable_kernels_agree_bit_for_bit() {
    if !avx512() {
        // past libtest's capture, so that the skip shows beside its `ok`; CI, whose CPU has
        // AVX-512, sets REQUIRE_AVX512=1 and fails instead
        assert!(
            std::env::var("REQUIRE_AVX512").map_or(true, |v| v != "1"),
            "REQUIRE_AVX512=1 but this CPU has no AVX-512"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED-AVX512 the_simd_and_portable_kernels_agree_bit_for_bit: no AVX-512 here, the portable kernels are the only ones"
        );
        return;
    }
    for (m, n, k) in [(3, 70, 53), (75, 1100, 600), (70, 40, 1024)] {
        let (a, b) = (data(m * k, 3), data(k * n, 4));
        let pk = Panels::pack(&b, k, n);
        for src in [B::Rows(&b, n), B::Panels(&pk)] {
            let nn = Nn {
                m,
                k,
                a: &a,
                lda: k,
                b: src,
                ldc: n,
                fin: Finish::NONE,
                epi: None,
            };
            let (mut simd, mut portable) = (vec![0.0; m * n], vec![0.0; m * n]);
            nn.run(true, 0, n, CPtr(simd.as_mut_ptr()));
            nn.run(false, 0, n, CPtr(portable.as_mut_ptr()));
            assert_eq!(simd, portable, "nn {m}x{n}x{k}");
        }
    }
}

/// The finish (shift and activation) gives the bits of the GEMM followed by
/// `kernels::bias_act`, whether the micro-kernel applies it in registers (ReLU, ReLU6; many
/// rows) or a pass over each block does (other activations, few rows), NaN and values beyond
/// 6 included; and the epilogue sees the finished values.
#[test]
fn the_finish_gives_the_bits_of_the_gemm_then_bias_and_activation() {
    use crate::device::cpu::kernels::{self, ActK};
    // streamed where rows are whole aligned lines (n a multiple of 16): full tiles, short tiles
    // (75 rows), several blocks of `p` (300), a last panel of 16 columns stored as usual (80),
    // and enough work for the columns to split over the threads (300 × 256 × 64)
    for &(m, n, k) in &[
        (3, 70, 53),
        (75, 100, 300),
        (70, 40, 1024),
        (9, 33, 7),
        (40, 64, 32),
        (75, 96, 300),
        (40, 80, 32),
        (300, 256, 64),
    ] {
        let (mut a, b) = (data(m * k, 7), data(k * n, 8));
        // a NaN in one row of A, and large values in another (beyond 6 after the GEMM)
        a[k] = f32::NAN;
        a[2 * k..3 * k].iter_mut().for_each(|v| *v *= 40.0);
        let pk = Panels::pack(&b, k, n);
        let shift = data(n, 9);
        for act in [ActK::None, ActK::Relu, ActK::Relu6, ActK::Tanh] {
            for shift in [&shift[..], &[]] {
                let mut want = vec![0.0; m * n];
                gemm_panels((m, &a, k), &pk, (&mut want, n));
                kernels::bias_act(act, &mut want, n, shift);
                let mut got = vec![0.0; m * n];
                let seen = std::sync::Mutex::new(Vec::new());
                let epi = |mut d: Done| {
                    for r in d.rows.clone() {
                        let j0 = d.cols.start;
                        let row = d.row(r).to_vec();
                        seen.lock().unwrap().push((r * n + j0, row));
                    }
                };
                let stream = false;
                let fin = Finish { shift, act, stream };
                gemm_panels_then((m, &a, k), &pk, (&mut got, n), fin, Some(&epi));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let what = format!("{m}x{n}x{k} {act:?}, shift {}", shift.len());
                assert_eq!(bits(&got), bits(&want), "{what}");
                for (at, row) in seen.into_inner().unwrap() {
                    assert_eq!(bits(&row), bits(&want[at..at + row.len()]), "{what}");
                }
                // stored around the caches (whole aligned lines where the row length allows)
                let mut streamed = crate::device::cpu::aligned::Aligned::zeroed(m * n);
                let fin = Finish {
                    stream: true,
                    ..fin
                };
                gemm_panels_then((m, &a, k), &pk, (&mut streamed, n), fin, None);
                assert_eq!(bits(&streamed), bits(&want), "{what}, streamed");
            }
        }
    }
}

/// With no `p` at all (k = 0) every kernel gives zeros (then the finish), whatever was in C.
#[test]
fn an_empty_reduction_gives_zeros() {
    for m in [1, 3, 8, 20] {
        let n = 40;
        let pk = Panels::pack(&[], 0, n);
        let mut c = vec![7.0; m * n];
        gemm_panels((m, &[], 0), &pk, (&mut c, n));
        assert!(c.iter().all(|&v| v == 0.0), "{m} rows");
    }
}
