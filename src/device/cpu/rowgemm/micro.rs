//! The row GEMM's micro-kernel: an 8 × 32 block of C (16 AVX-512 accumulators) over a block of
//! `p`, reading A's rows in place and a packed panel of B, and its shorter versions for a
//! block's last tile of fewer rows. Every element is the FMA chain over `p` in order, whatever
//! the tile's height, so the results do not depend on it. On the last block of `p` a tile
//! applies the layer's shift and ReLU or ReLU6 in registers as it stores C ([`Fin`]).

use super::super::activation::act_zmm;
use super::{ActK, MAX_PER_TURN, MR, NR};

/// What a tile applies to its values as it stores them: `act(c + shift[j])`, the shift from
/// the tile's first column (null: none) and the activation (`None`, `Relu` or `Relu6`; any
/// other is not applied here); `stream`: rows of whole aligned lines stored around the caches.
#[derive(Clone, Copy)]
pub(super) struct Fin {
    pub(super) shift: *const f32,
    pub(super) act: ActK,
    pub(super) stream: bool,
}

/// [`micro`] in a tile of 8, 4, 2 or 1 rows, the fewest that hold `rows`: a block's last tile
/// of few rows costs little more than its rows (a 7 × 7 image's 49 rows ran as 56).
///
/// # Safety
/// As [`micro`], with `rows ≤ MR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn micro_rows(
    kc: usize,
    a: (*const f32, usize),
    b: (*const f32, (*const f32, usize)),
    c: (*mut f32, usize, *const f32),
    (rows, cols): (usize, usize),
    first: (bool, Fin),
) {
    match rows {
        5.. => micro::<MR>(kc, a, b, c, (rows, cols), first),
        3 | 4 => micro::<4>(kc, a, b, c, (rows, cols), first),
        2 => micro::<2>(kc, a, b, c, (rows, cols), first),
        _ => micro::<1>(kc, a, b, c, (rows, cols), first),
    }
}

/// `C[rows × cols] (+)= A·B` over `kc` values of `p`: `a` points at row 0's first value, rows
/// `lda` apart (rows past `rows` are not read: row 0 stands in for them, its results dropped),
/// `b` a packed `kc × NR` panel (`next`, when not null, this pass's share of the next panel to
/// fetch into L2 meanwhile, `per_turn` lines every four steps);
/// `first` starts each chain from zero, otherwise it continues from C; `fin` is applied as C
/// is stored; `c_next` (not null) the next tile's C, `MR` rows of `NR` values, `ldc` apart, to
/// fetch into L2 meanwhile.
///
/// # Safety
/// AVX-512F present; `rows` rows of `kc` values of A and `kc` rows of the panel readable;
/// `rows × cols` of C (`ldc` apart) writable; `cols` values of the shift readable unless null.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn micro<const M: usize>(
    kc: usize,
    (a, lda): (*const f32, usize),
    (b, (next, per_turn)): (*const f32, (*const f32, usize)),
    (c, ldc, c_next): (*mut f32, usize, *const f32),
    (rows, cols): (usize, usize),
    (first, fin): (bool, Fin),
) {
    use std::arch::x86_64::*;
    if !c_next.is_null() {
        for r in 0..MR {
            let row = c_next.wrapping_add(r * ldc) as *const i8;
            _mm_prefetch::<_MM_HINT_T1>(row);
            _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(64));
        }
    }
    let m0 = ((1u32 << cols.min(16)) - 1) as u16;
    let m1 = ((1u32 << cols.saturating_sub(16)) - 1) as u16;
    let mut acc = [[_mm512_setzero_ps(); 2]; M];
    // every loop over `acc` runs all M rows (rows past `rows` skipped by a test), so that it
    // unrolls to constant indices and `acc` stays in registers: with `.take(rows)` LLVM kept
    // it on the stack in some builds, storing all 16 accumulators every turn (35% slower)
    if !first {
        for (r, acc_r) in acc.iter_mut().enumerate() {
            if r < rows {
                let row = c.add(r * ldc);
                acc_r[0] = _mm512_maskz_loadu_ps(m0, row);
                acc_r[1] = _mm512_maskz_loadu_ps(m1, row.wrapping_add(16));
            }
        }
    }
    let arow: [*const f32; M] = std::array::from_fn(|r| a.add(if r < rows { r * lda } else { 0 }));
    // one value of `p`: each row's two chains take one more FMA
    let step = |acc: &mut [[__m512; 2]; M], q: usize| {
        let b0 = _mm512_loadu_ps(b.add(q * NR));
        let b1 = _mm512_loadu_ps(b.add(q * NR + 16));
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_ps(*arow[r].add(q));
            acc_r[0] = _mm512_fmadd_ps(x, b0, acc_r[0]);
            acc_r[1] = _mm512_fmadd_ps(x, b1, acc_r[1]);
        }
    };
    // four values of `p` a turn, the prefetch decided once (the loop's branches and counters
    // cost issue slots the FMAs need)
    let (turns, rest) = (kc / 4, kc % 4);
    if next.is_null() {
        for t in 0..turns {
            for u in 0..4 {
                step(&mut acc, 4 * t + u);
            }
        }
    } else {
        for t in 0..turns {
            // this pass's share of the next panel, `per_turn` lines a turn: always
            // MAX_PER_TURN prefetches, the surplus repeating the last line (a loop of fixed
            // length, like every loop here)
            let line = next.wrapping_add(t * per_turn * 16) as *const i8;
            for u in 0..MAX_PER_TURN {
                _mm_prefetch::<_MM_HINT_T1>(line.wrapping_add(64 * u.min(per_turn - 1)));
            }
            for u in 0..4 {
                step(&mut acc, 4 * t + u);
            }
        }
    }
    for q in kc - rest..kc {
        step(&mut acc, q);
    }
    if !fin.shift.is_null() {
        let s = [
            _mm512_maskz_loadu_ps(m0, fin.shift),
            _mm512_maskz_loadu_ps(m1, fin.shift.wrapping_add(16)),
        ];
        for acc_r in acc.iter_mut() {
            acc_r[0] = _mm512_add_ps(acc_r[0], s[0]);
            acc_r[1] = _mm512_add_ps(acc_r[1], s[1]);
        }
    }
    if matches!(fin.act, ActK::Relu | ActK::Relu6) {
        acc.iter_mut()
            .flatten()
            .for_each(|v| *v = act_zmm(fin.act, *v));
    }
    // non-temporal stores take whole aligned lines (no mask): every row of the tile is
    let aligned = (c as usize | (ldc * 4)).is_multiple_of(64);
    if fin.stream && cols == NR && aligned {
        for (r, acc_r) in acc.iter().enumerate() {
            if r < rows {
                let row = c.add(r * ldc);
                _mm512_stream_ps(row, acc_r[0]);
                _mm512_stream_ps(row.wrapping_add(16), acc_r[1]);
            }
        }
        return;
    }
    for (r, acc_r) in acc.iter().enumerate() {
        if r < rows {
            let row = c.add(r * ldc);
            _mm512_mask_storeu_ps(row, m0, acc_r[0]);
            _mm512_mask_storeu_ps(row.wrapping_add(16), m1, acc_r[1]);
        }
    }
}
