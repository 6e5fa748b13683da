//! Batch-invariant GEMMs for the layers whose rows are requests (linear layers, LSTM gates):
//! every element of `C = A·B` is computed by the same sequence of fused multiply-adds whatever
//! the number of rows `m`, the blocking, the thread split or the instruction set, so a request
//! gets bit-identical outputs served alone or batched, by construction.
//!
//! `c[i][j]` is the FMA chain over `p = 0..k` in order, starting from 0
//! (`c = fma(a[i][p], b[p][j], c)`). `B` is a layer's weights packed once into panels
//! ([`Panels`], the usual case) or a plain row-major matrix (convolutions of small images).
//! Fewer than 8 rows stream B once (a GEMV at batch 1), with the partial chains of a panel's
//! columns in registers over all of `k` when B is packed, or in L1 when it is not; more run an
//! 8 × 32 micro-kernel over blocks of B (packed per block when it was not beforehand), reading
//! A's rows in place,
//! the partial chains kept in C between blocks of `p`.
//!
//! A [`Finish`] (a layer's shift and activation) is applied to C's values as they are stored
//! the last time — in the micro-kernel's registers for ReLU and ReLU6, else over each block
//! while it is in cache — and an epilogue ([`gemm_panels_then`]) may then run over each block
//! of C as soon as it is final (a convolution's residual add).
//!
//! An FMA is exactly rounded, so the AVX-512 kernels and the portable ones (`f32::mul_add`)
//! give the same bits; a test checks it. Work of at least [`PARALLEL_MACS`] multiply-adds is
//! split by columns over the CPU device's threads (`team`), which does not change any element's
//! arithmetic.

use super::activation::{self, ActK};
use super::aligned::Aligned;
use super::panels::Panels;
use super::par::{self, avx512, vectorized_fn};
use super::team;

/// GEMMs with at least this many multiply-adds split their columns over the threads: from
/// 2¹⁸, a batch-1 decoder step's 512 × 512 projections (1 MB of weights each, from memory)
/// stream on both cores — the Transformer's step 4–13% faster than from 2²⁰, in 5 of 5
/// interleaved pairs.
const PARALLEL_MACS: usize = 1 << 18;

/// `C[m×n] = A[m×k]·B[k×n]`, all row-major with unit column stride: `A` rows `lda` apart, `B`
/// rows `ldb` apart, `C` rows `ldc` apart.
pub fn gemm_nn(
    (m, n, k): (usize, usize, usize),
    (a, lda): (&[f32], usize),
    (b, ldb): (&[f32], usize),
    (c, ldc): (&mut [f32], usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        k == 0 || (m - 1) * lda + k <= a.len(),
        "gemm_nn: A out of bounds"
    );
    assert!(
        k == 0 || (k - 1) * ldb + n <= b.len(),
        "gemm_nn: B out of bounds"
    );
    assert!((m - 1) * ldc + n <= c.len(), "gemm_nn: C out of bounds");
    let job = Nn {
        m,
        k,
        a,
        lda,
        b: B::Rows(b, ldb),
        ldc,
        fin: Finish::NONE,
        epi: None,
    };
    let simd = avx512();
    split_columns(n, m * n * k, c.as_mut_ptr(), &|j0, j1, c| {
        job.run(simd, j0, j1, c)
    });
}

/// [`gemm_nn`] with `B` packed beforehand ([`Panels`]): the same bits, without packing B.
pub fn gemm_panels((m, a, lda): (usize, &[f32], usize), b: &Panels, (c, ldc): (&mut [f32], usize)) {
    gemm_panels_then((m, a, lda), b, (c, ldc), Finish::NONE, None)
}

/// What becomes of each element of C once its chain is complete, before any epilogue sees it:
/// `c ← act(c + shift[j])` (`shift` per column, empty: none) — the operations of
/// [`kernels::bias_act`](super::kernels::bias_act), in the same order, so the same bits.
///
/// `stream`: C will not be read again before it leaves the caches (a layer's output over a
/// large sub-batch), so the micro-kernel stores its finished values straight to memory
/// (non-temporal stores) instead of fetching each line to write it and evicting other data
/// for it — where it can: 8 rows or more, a finish it applies in registers, tiles of 32
/// columns whose rows are whole aligned lines (the rest is stored as usual). With `k` beyond
/// one block of `p` the partial sums are still read back through the caches. An epilogue
/// should then not read C (it would read it back from memory).
#[derive(Clone, Copy)]
pub struct Finish<'a> {
    pub shift: &'a [f32],
    pub act: ActK,
    pub stream: bool,
}

impl Finish<'_> {
    /// Nothing: C holds the products.
    pub const NONE: Finish<'static> = Finish {
        shift: &[],
        act: ActK::None,
        stream: false,
    };

    /// Whether the micro-kernel applies it in registers (else it runs over each finished
    /// block while it is in cache).
    pub(super) fn in_registers(&self) -> bool {
        matches!(self.act, ActK::None | ActK::Relu | ActK::Relu6)
    }

    /// Nothing to do.
    fn is_none(&self) -> bool {
        self.shift.is_empty() && self.act == ActK::None
    }
}

vectorized_fn! {
    /// [`Finish`] over rows `rows`, columns `cols` of C (a block no micro-kernel finished).
    fn finish_block(d: &mut Done, fin: &Finish) {
        let shift = fin.shift.get(d.cols.clone()).unwrap_or(&[]);
        for r in d.rows.clone() {
            activation::shift_act(fin.act, d.row(r), shift);
        }
    }
}

/// What runs over each block of C as soon as its values are final (after the [`Finish`]),
/// while it is still in cache (a convolution's residual add): every element of C is in exactly one
/// [`Done`] block, each handed over once, from the thread that computed it. It must not run a
/// GEMM itself (the thread's packing buffers are in use).
pub type Epilogue<'a> = &'a (dyn Fn(Done) + Sync);

/// A block of C whose values are final: rows `rows`, columns `cols`.
pub struct Done {
    c: CPtr,
    ldc: usize,
    /// The block's rows of C.
    pub rows: std::ops::Range<usize>,
    /// The block's columns of C.
    pub cols: std::ops::Range<usize>,
}

impl Done {
    /// Row `r`'s columns `cols` (`r` in `rows`).
    pub fn row(&mut self, r: usize) -> &mut [f32] {
        assert!(self.rows.contains(&r), "row {r} outside {:?}", self.rows);
        // SAFETY: inside C (the GEMM checked its bounds); blocks are disjoint and each is
        // handed over once, so no other reference to these elements exists meanwhile.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.c.0.add(r * self.ldc + self.cols.start),
                self.cols.len(),
            )
        }
    }
}

/// [`gemm_panels`], `fin` applied to each element of C, then `epi` over each block of C as it
/// is finished (the same bits in C as [`gemm_panels`] then [`Finish`], before `epi` changes
/// them).
pub fn gemm_panels_then(
    (m, a, lda): (usize, &[f32], usize),
    b: &Panels,
    (c, ldc): (&mut [f32], usize),
    fin: Finish,
    epi: Option<Epilogue>,
) {
    let (n, k) = (b.n, b.k);
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        k == 0 || (m - 1) * lda + k <= a.len(),
        "gemm_panels: A out of bounds"
    );
    assert!((m - 1) * ldc + n <= c.len(), "gemm_panels: C out of bounds");
    assert!(
        fin.shift.is_empty() || fin.shift.len() >= n,
        "gemm_panels: shift shorter than a row"
    );
    let job = Nn {
        m,
        k,
        a,
        lda,
        b: B::Panels(b),
        ldc,
        fin,
        epi,
    };
    let simd = avx512();
    split_columns(n, m * n * k, c.as_mut_ptr(), &|j0, j1, c| {
        job.run(simd, j0, j1, c)
    });
}

/// A C pointer that may cross to the other threads of [`split_columns`].
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: the threads of `split_columns` write disjoint column ranges of C.
unsafe impl Send for CPtr {}
unsafe impl Sync for CPtr {}

/// Runs `f(j0, j1, c)` over columns `0..n`: at once, or in one range per thread of the team
/// (cut at multiples of `NR`) when the work is large enough.
fn split_columns(n: usize, macs: usize, c: *mut f32, f: &(dyn Fn(usize, usize, CPtr) + Sync)) {
    let c = CPtr(c);
    if macs < PARALLEL_MACS || n < 32 || !par::may_split() {
        return f(0, n, c);
    }
    let team = team::team();
    // a multiple of NR: a panel of packed weights is never split
    let per = n.div_ceil(team.threads()).div_ceil(NR) * NR;
    team.run(n.div_ceil(per), &|i| f(i * per, ((i + 1) * per).min(n), c));
}

/// One `gemm_nn` call's operands.
struct Nn<'a> {
    m: usize,
    k: usize,
    a: &'a [f32],
    lda: usize,
    b: B<'a>,
    ldc: usize,
    /// Applied to each element of C once its chain is complete.
    fin: Finish<'a>,
    /// Run over each finished block of C, after `fin`.
    epi: Option<Epilogue<'a>>,
}

/// Where B comes from: a row-major matrix (rows `ldb` apart), or weights packed beforehand.
#[derive(Clone, Copy)]
enum B<'a> {
    Rows(&'a [f32], usize),
    Panels(&'a Panels),
}

impl B<'_> {
    /// Element `(p, j)`.
    #[inline]
    fn at(&self, p: usize, j: usize) -> f32 {
        match *self {
            B::Rows(b, ldb) => b[p * ldb + j],
            B::Panels(pk) => pk.at(p, j),
        }
    }
}

/// Blocks of rows of A, of `p`, and of columns of B (B packed when not packed beforehand; see
/// [`Nn::packed`]).
pub(super) const MC: usize = 64;
const KC: usize = 256;
const NC: usize = 1024;
/// How many rows of a panel the few-rows kernel fetches ahead of the one it reads (2 KiB).
const STREAM_AHEAD: usize = 16;
/// Lines of the next weight panel the micro-kernel prefetches per turn of four steps, at most
/// (a panel of 256 × 32 values needs 1 a turn from each of 8 tiles, 4 from each of 2).
const MAX_PER_TURN: usize = 4;
/// The micro-kernel's block of C: 8 rows × 32 columns (16 AVX-512 accumulators).
const MR: usize = 8;
const NR: usize = super::panels::NR;

/// Row stride of a block of A copied out of a matrix whose rows are a multiple of 4 KiB apart
/// (their lines would share a few L1 sets and alias the store buffer's 4 KiB check): `KC` plus
/// one cache line.
const KC_PAD: usize = KC + 16;

thread_local! {
    /// Each thread's buffers (a block of A, `MC × KC_PAD`; a block of B, `KC × NC`),
    /// allocated once.
    static PACK: std::cell::RefCell<(Aligned, Aligned)> =
        std::cell::RefCell::new((Aligned::default(), Aligned::default()));
}

/// Allocates this thread's packing buffers now (a device calls it when it prepares, so that
/// serving allocates nothing; other threads allocate theirs at their first packed GEMM).
pub fn reserve() {
    PACK.with(|pk| {
        sized(&mut pk.borrow_mut());
    });
}

/// The packing buffers at their fixed sizes (allocated the first time only).
fn sized(pk: &mut (Aligned, Aligned)) -> (&mut [f32], &mut [f32]) {
    if pk.0.len() < MC * KC_PAD {
        *pk = (Aligned::zeroed(MC * KC_PAD), Aligned::zeroed(KC * NC));
    }
    (&mut pk.0, &mut pk.1)
}

impl Nn<'_> {
    /// Columns `j0..j1` of every row of C, with the AVX-512 kernels or the portable loop.
    fn run(&self, simd: bool, j0: usize, j1: usize, c: CPtr) {
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: AVX-512F is present; `gemm_nn` checked the operands' bounds; the
            // threads write disjoint columns of C.
            unsafe {
                match (self.m < MR, self.b) {
                    (true, B::Rows(b, ldb)) => self.stream((b, ldb), j0, j1, c),
                    (true, B::Panels(pk)) => self.stream_panels(pk, j0, j1, c),
                    // the packed kernel hands its blocks over as it finishes them
                    (false, _) if self.k > 0 => return self.packed(j0, j1, c),
                    // empty chains: zeros, as the other kernels give
                    (false, _) => {
                        for r in 0..self.m {
                            let row = c.0.add(r * self.ldc + j0);
                            std::ptr::write_bytes(row, 0, j1 - j0);
                        }
                    }
                }
            }
            return self.done(0..self.m, j0..j1, c, false);
        }
        let _ = simd;
        for r in 0..self.m {
            for col in j0..j1 {
                let mut s = 0.0f32;
                for p in 0..self.k {
                    s = self.a[r * self.lda + p].mul_add(self.b.at(p, col), s);
                }
                // SAFETY: inside C (checked by `gemm_nn`); the threads write disjoint columns.
                unsafe { *c.0.add(r * self.ldc + col) = s };
            }
        }
        self.done(0..self.m, j0..j1, c, false)
    }

    /// A block of C whose chains are complete: the finish applied unless the micro-kernel
    /// did (`finished`), then handed to the epilogue, if there is one.
    fn done(
        &self,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
        c: CPtr,
        finished: bool,
    ) {
        let mut d = Done {
            c,
            ldc: self.ldc,
            rows,
            cols,
        };
        if !finished && !self.fin.is_none() {
            finish_block(&mut d, &self.fin);
        }
        if let Some(epi) = self.epi {
            epi(d)
        }
    }

    /// Few rows: C's rows a chunk of columns at a time stay in L1 while B streams through
    /// once, four rows of B a pass (each element's FMA chain still runs in order of `p`).
    ///
    /// # Safety
    /// AVX-512F present; operands as checked by `gemm_nn`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn stream(&self, (bm, ldb): (&[f32], usize), j0: usize, j1: usize, c: CPtr) {
        use std::arch::x86_64::*;
        let (m, k) = (self.m, self.k);
        let chunk = (2048 / m).div_ceil(16) * 16;
        let mut j = j0;
        while j < j1 {
            let w = chunk.min(j1 - j);
            let vecs = w.div_ceil(16);
            let mask = |v: usize| ((1u32 << (w - 16 * v).min(16)) - 1) as u16;
            for r in 0..m {
                let row = c.0.add(r * self.ldc + j);
                for v in 0..vecs {
                    _mm512_mask_storeu_ps(row.add(16 * v), mask(v), _mm512_setzero_ps());
                }
            }
            let mut p = 0;
            while p < k {
                let t = 4.min(k - p);
                for v in 0..vecs {
                    let mk = mask(v);
                    let mut bv = [_mm512_setzero_ps(); 4];
                    for (u, b) in bv.iter_mut().enumerate().take(t) {
                        *b = _mm512_maskz_loadu_ps(mk, bm.as_ptr().add((p + u) * ldb + j + 16 * v));
                    }
                    for r in 0..m {
                        let dst = c.0.add(r * self.ldc + j + 16 * v);
                        let mut acc = _mm512_maskz_loadu_ps(mk, dst);
                        let arow = self.a.as_ptr().add(r * self.lda + p);
                        for (u, b) in bv.iter().enumerate().take(t) {
                            acc = _mm512_fmadd_ps(_mm512_set1_ps(*arow.add(u)), *b, acc);
                        }
                        _mm512_mask_storeu_ps(dst, mk, acc);
                    }
                }
                p += t;
            }
            j += w;
        }
    }

    /// Few rows against packed weights: one panel (NR columns) at a time, every row's partial
    /// chains in registers over all of `k`, the panel read as one sequential run.
    ///
    /// # Safety
    /// AVX-512F present; operands as checked by `gemm_panels`; `j0` a multiple of `NR`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn stream_panels(&self, pk: &Panels, j0: usize, j1: usize, c: CPtr) {
        match self.m {
            1 => self.stream_rows::<1>(pk, j0, j1, c),
            2 => self.stream_rows::<2>(pk, j0, j1, c),
            3 => self.stream_rows::<3>(pk, j0, j1, c),
            4 => self.stream_rows::<4>(pk, j0, j1, c),
            5 => self.stream_rows::<5>(pk, j0, j1, c),
            6 => self.stream_rows::<6>(pk, j0, j1, c),
            _ => self.stream_rows::<7>(pk, j0, j1, c),
        }
    }

    /// [`Self::stream_panels`] for exactly `M` rows (`M < MR`), its accumulators in registers:
    /// two panels at a time for up to 3 rows (two streams of weights in flight, and twice the
    /// independent FMA chains), one otherwise.
    ///
    /// # Safety
    /// As [`Self::stream_panels`], with `self.m == M`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn stream_rows<const M: usize>(&self, pk: &Panels, j0: usize, j1: usize, c: CPtr) {
        let mut j = j0;
        while j < j1 {
            if M <= 3 && j1 - j > NR {
                self.stream_block::<M, 2>(pk, j, j1, c);
                j += 2 * NR;
            } else {
                self.stream_block::<M, 1>(pk, j, j1, c);
                j += NR;
            }
        }
    }

    /// `P` panels from column `j` (those past `j1` not stored) for `M` rows.
    ///
    /// # Safety
    /// As [`Self::stream_rows`]; the `P` panels exist.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn stream_block<const M: usize, const P: usize>(
        &self,
        pk: &Panels,
        j: usize,
        j1: usize,
        c: CPtr,
    ) {
        use std::arch::x86_64::*;
        let panel: [*const f32; P] = std::array::from_fn(|q| pk.from(0, j + q * NR).as_ptr());
        let mut acc = [[[_mm512_setzero_ps(); 2]; P]; M];
        for p in 0..self.k {
            for (q, panel_q) in panel.iter().enumerate() {
                // each panel's rows STREAM_AHEAD ahead, on their way from memory (a prefetch
                // past the panel's end is harmless: it never faults)
                let ahead = panel_q.wrapping_add((p + STREAM_AHEAD) * NR) as *const i8;
                _mm_prefetch::<_MM_HINT_T0>(ahead);
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
                let b0 = _mm512_loadu_ps(panel_q.add(p * NR));
                let b1 = _mm512_loadu_ps(panel_q.add(p * NR + 16));
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*self.a.get_unchecked(r * self.lda + p));
                    acc_r[q][0] = _mm512_fmadd_ps(x, b0, acc_r[q][0]);
                    acc_r[q][1] = _mm512_fmadd_ps(x, b1, acc_r[q][1]);
                }
            }
        }
        for q in 0..P {
            let w = NR.min(j1.saturating_sub(j + q * NR));
            let m0 = ((1u32 << w.min(16)) - 1) as u16;
            let m1 = ((1u32 << w.saturating_sub(16)) - 1) as u16;
            for (r, acc_r) in acc.iter().enumerate() {
                let row = c.0.add(r * self.ldc + j + q * NR);
                _mm512_mask_storeu_ps(row, m0, acc_r[q][0]);
                _mm512_mask_storeu_ps(row.wrapping_add(16), m1, acc_r[q][1]);
            }
        }
    }

    /// Many rows: blocks of B (KC × NC, packed into each thread's buffer unless packed
    /// beforehand) and an 8 × 32 micro-kernel over them that reads A's rows in place (packing
    /// A into MR-tall panels cost 6% of a BERT pass, each thread packing all of A again for
    /// each block of its columns), or from a plain copy of the block when A's rows are a
    /// multiple of 4 KiB apart; C holds the partial chains between blocks of `p` (stored and reloaded exactly,
    /// so each chain is unchanged).
    ///
    /// # Safety
    /// AVX-512F present; operands as checked by `gemm_nn`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn packed(&self, j0: usize, j1: usize, c: CPtr) {
        PACK.with(|pk| {
            let mut pk = pk.borrow_mut();
            let (ap, bp) = sized(&mut pk);
            let aliased = (self.lda * 4).is_multiple_of(4096);
            let mut jc = j0;
            while jc < j1 {
                let nc = NC.min(j1 - jc);
                let mut pc = 0;
                while pc < self.k {
                    let kc = KC.min(self.k - pc);
                    if let B::Rows(b, ldb) = self.b {
                        Self::pack_b((b, ldb), bp, (pc, kc), (jc, nc));
                    }
                    // the B panel of columns `jc + jr`, rows `pc..`, NR values a row
                    let panel = |jr: usize| match self.b {
                        B::Rows(..) => bp.as_ptr().add(jr * kc),
                        B::Panels(pk) => pk.from(pc, jc + jr).as_ptr(),
                    };
                    // the finish in the micro-kernel's registers, on the last block of `p`
                    let last = pc + kc == self.k && self.fin.in_registers();
                    let fin = |jr: usize| Fin {
                        shift: match (last, self.fin.shift.is_empty()) {
                            (true, false) => self.fin.shift.as_ptr().add(jc + jr),
                            _ => std::ptr::null(),
                        },
                        act: if last { self.fin.act } else { ActK::None },
                        stream: last && self.fin.stream,
                    };
                    let mut ic = 0;
                    while ic < self.m {
                        let mc = MC.min(self.m - ic);
                        // A's rows read in place, each of the MR rows a stream of broadcasts
                        // (an 8-row block of `kc` values fits in L1), or copied first when
                        // their stride aliases
                        let (a0, alda) = if aliased {
                            for r in 0..mc {
                                let src = &self.a[(ic + r) * self.lda + pc..][..kc];
                                ap[r * KC_PAD..r * KC_PAD + kc].copy_from_slice(src);
                            }
                            (ap.as_ptr(), KC_PAD)
                        } else {
                            (self.a.as_ptr().add(ic * self.lda + pc), self.lda)
                        };
                        // the passes over a panel fetch the next one into L2 meanwhile (weights
                        // come from memory, and each panel starts a new stream), each pass its
                        // share of the lines, spread over its steps: all at once from the first
                        // pass asked for more than memory delivers in that time
                        let tiles = mc.div_ceil(MR);
                        let lines = (kc * NR).div_ceil(16);
                        let per_turn = lines
                            .div_ceil(tiles * (kc / 4).max(1))
                            .clamp(1, MAX_PER_TURN);
                        for jr in (0..nc).step_by(NR) {
                            let next = if jr + NR < nc {
                                panel(jr + NR)
                            } else {
                                std::ptr::null()
                            };
                            for (t, ir) in (0..mc).step_by(MR).enumerate() {
                                let dst = c.0.add((ic + ir) * self.ldc + jc + jr);
                                let share = match next.is_null() {
                                    true => next,
                                    false => next.wrapping_add(t * (kc / 4).max(1) * per_turn * 16),
                                };
                                // the partial chains the next tile continues, on their way
                                // into L2 meanwhile (the rows of C a GEMM sweeps once a block of
                                // `p` can outgrow L2: 1.6 MB a thread for MobileNet's last
                                // layer at batch 16)
                                let c_next = match (pc > 0, ir + MR < mc, jr + NR < nc) {
                                    (false, ..) => std::ptr::null(),
                                    (true, true, _) => dst.add(MR * self.ldc),
                                    (true, false, true) => c.0.add(ic * self.ldc + jc + jr + NR),
                                    (true, false, false) => std::ptr::null(),
                                };
                                micro_rows(
                                    kc,
                                    (a0.add(ir * alda), alda),
                                    (panel(jr), (share, per_turn)),
                                    (dst, self.ldc, c_next),
                                    (MR.min(mc - ir), NR.min(nc - jr)),
                                    (pc == 0, fin(jr)),
                                );
                            }
                        }
                        if pc + kc == self.k {
                            self.done(ic..ic + mc, jc..jc + nc, c, last);
                        }
                        ic += mc;
                    }
                    pc += kc;
                }
                jc += nc;
            }
            if self.fin.stream {
                // the streamed lines reach memory before the GEMM is seen as done
                std::arch::x86_64::_mm_sfence();
            }
        })
    }

    /// B's rows `pc..pc + kc`, columns `jc..jc + nc`, as NR-wide panels (`kc × NR` each, rows
    /// contiguous), zero-padded past `nc`. B is read row by row, each row's `nc` columns in one
    /// sequential run (weights usually come from memory, not cache: a run per row keeps the
    /// hardware prefetcher streaming where a panel at a time would read 128 bytes a row).
    fn pack_b(
        (b, ldb): (&[f32], usize),
        bp: &mut [f32],
        (pc, kc): (usize, usize),
        (jc, nc): (usize, usize),
    ) {
        for q in 0..kc {
            let row = &b[(pc + q) * ldb + jc..][..nc];
            for (jr, src) in (0..nc).step_by(NR).zip(row.chunks(NR)) {
                let dst = &mut bp[jr * kc + q * NR..jr * kc + (q + 1) * NR];
                dst[..src.len()].copy_from_slice(src);
                dst[src.len()..].fill(0.0);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod micro;
#[cfg(target_arch = "x86_64")]
use micro::{micro_rows, Fin};

#[cfg(test)]
mod tests;
