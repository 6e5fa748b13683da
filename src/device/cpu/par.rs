//! How the CPU kernels outside the GEMMs use the machine: [`vectorized_fn!`] compiles a kernel
//! for AVX-512 with FMA when the CPU has it (the crate is built for baseline x86-64, so loops
//! would otherwise vectorise 4 wide), and [`split_rows`] shares the rows of an output between
//! the threads of the device's [`team`](super::team). Neither changes any element's
//! arithmetic: `f32::mul_add` is exactly rounded with or without the FMA unit, and a row is
//! computed by one thread whatever the split.

use std::cell::Cell;

thread_local! {
    static IN_LIBRARY: Cell<bool> = const { Cell::new(false) };
}

pub(crate) use super::team::in_share;
use super::team::team;

/// Whether work may be split over the team from here: two threads or more, and not already
/// inside a share.
pub(crate) fn may_split() -> bool {
    team().threads() >= 2 && !in_share()
}

/// True while this thread is inside a call to the `gemm` crate (and the rayon jobs it may
/// start). The crate allocates its packing buffers inside some calls; the steady-state
/// allocation test uses this to tell its allocations apart from lazybatch's own serving path,
/// the team's splits included (they allocate nothing).
pub fn in_library() -> bool {
    IN_LIBRARY.with(|g| g.get())
}

/// Runs `f` marked as [`in_library`].
pub(crate) fn library_scope<R>(f: impl FnOnce() -> R) -> R {
    let was = IN_LIBRARY.with(|g| g.replace(true));
    let r = f();
    IN_LIBRARY.with(|g| g.set(was));
    r
}

/// Work (element operations) below which a kernel stays on the calling thread: handing half
/// to the other core costs a few microseconds.
const PARALLEL_WORK: usize = 1 << 16;

/// Whether this CPU has AVX-512F (and, with it, FMA).
pub(crate) fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Defines a function whose body is compiled twice — for AVX-512 with FMA, taken when the CPU
/// has them, and for the baseline — so that its loops vectorise 16 wide (the crate is built
/// for baseline x86-64, where they would run 4 wide and `mul_add` would call libm).
macro_rules! vectorized_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $crate::device::cpu::par::vectorized_fn! {
            $(#[$m])* $vis fn $name($($arg: $ty),*) -> () $body
        }
    };
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[inline(always)]
            fn body($($arg: $ty),*) -> $ret $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) -> $ret {
                body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::device::cpu::par::avx512() {
                // SAFETY: the features `avx512` enables are present on this CPU.
                return unsafe { avx512($($arg),*) };
            }
            body($($arg),*)
        }
    };
}
pub(crate) use vectorized_fn;

/// Runs `f(first_row, rows)` over `out` cut into rows of `row_len` (the last may be shorter):
/// at once when `work` is small or the caller is already running a share, else one contiguous
/// range of rows per thread of the [`team`].
pub(crate) fn split_rows(
    out: &mut [f32],
    row_len: usize,
    work: usize,
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    split_rows_pair((out, &mut []), (row_len, 0), work, |r0, a, _| f(r0, a));
}

/// [`split_rows`] over two outputs of the same rows at once (`row_len.0` values a row in `a`,
/// `row_len.1` in `b`; `b` may be empty): `f(first_row, rows_of_a, rows_of_b)`. A convolution's
/// own output and the residual sum it completes; attention's heads and their scores.
pub(crate) fn split_rows_pair(
    (a, b): (&mut [f32], &mut [f32]),
    (la, lb): (usize, usize),
    work: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) {
    let rows = a.len().div_ceil(la.max(1));
    let Some(per) = share(rows, work) else {
        return f(0, a, b);
    };
    let (pa, pb) = (Shared::new(a), Shared::new(b));
    team().run(rows.div_ceil(per), &|i| {
        // SAFETY: share i takes rows i·per.. of both outputs, disjoint from every other
        // share's; both outlive the run
        let (x, y) = unsafe {
            (
                pa.range(i * per * la, per * la),
                pb.range(i * per * lb, per * lb),
            )
        };
        f(i * per, x, y)
    });
}

/// A mutable slice that the shares of one [`Team::run`] cut into disjoint ranges.
pub(crate) struct Shared<'a, T> {
    ptr: *mut T,
    len: usize,
    _slice: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: the shares take disjoint ranges ([`Shared::range`]'s contract), so sending the
// pointer to them is as safe as sending each its own `&mut` range.
unsafe impl<T: Send> Sync for Shared<'_, T> {}
unsafe impl<T: Send> Send for Shared<'_, T> {}

impl<'a, T> Shared<'a, T> {
    pub(crate) fn new(s: &'a mut [T]) -> Self {
        Shared {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            _slice: std::marker::PhantomData,
        }
    }

    /// Values `start..start + len`, clipped to the slice (empty past its end).
    ///
    /// # Safety
    /// No two live ranges overlap (each share its own).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn range(&self, start: usize, len: usize) -> &'a mut [T] {
        let start = start.min(self.len);
        let len = len.min(self.len - start);
        // SAFETY: inside the slice (clipped above); exclusive by the caller's contract
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// Rows per thread when `rows` rows of `work` element operations are worth splitting over the
/// team, or None: small work, one thread, or a caller that is already running a share of a
/// parallel job.
fn share(rows: usize, work: usize) -> Option<usize> {
    let threads = team().threads().min(rows);
    if work < PARALLEL_WORK || threads < 2 || in_share() {
        return None;
    }
    Some(rows.div_ceil(threads))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_rows_visits_every_row_once_with_its_index() {
        for (rows, len, work) in [
            (1, 3, 1 << 20),
            (7, 5, 1 << 20),
            (64, 2, 1),
            (9, 1, 1 << 30),
        ] {
            let mut out = vec![0.0f32; rows * len];
            split_rows(&mut out, len, work, |r0, chunk| {
                for (i, row) in chunk.chunks_mut(len).enumerate() {
                    row.iter_mut().for_each(|v| *v += (r0 + i) as f32 + 1.0);
                }
            });
            let want: Vec<f32> = (0..rows)
                .flat_map(|r| std::iter::repeat_n(r as f32 + 1.0, len))
                .collect();
            assert_eq!(out, want, "{rows} rows of {len}");
        }
    }

    /// Both outputs of a pair are cut at the same rows, a shorter last row included, and every
    /// row visited once with its index.
    #[test]
    fn split_rows_pair_cuts_both_outputs_alike() {
        for (len, row, work) in [(23, 4, 1 << 20), (64, 8, 1 << 20), (10, 3, 1)] {
            let (mut a, mut b) = (vec![0.0f32; len], vec![0.0f32; len]);
            split_rows_pair((&mut a, &mut b), (row, row), work, |r0, x, y| {
                assert_eq!(x.len(), y.len());
                for (i, (x, y)) in x.chunks_mut(row).zip(y.chunks_mut(row)).enumerate() {
                    x.iter_mut().for_each(|v| *v += (r0 + i) as f32 + 1.0);
                    y.iter_mut().for_each(|v| *v -= (r0 + i) as f32 + 1.0);
                }
            });
            let want: Vec<f32> = (0..len).map(|j| (j / row) as f32 + 1.0).collect();
            assert_eq!(a, want, "{len} values in rows of {row}");
            assert!(a.iter().zip(&b).all(|(x, y)| *x == -*y));
        }
    }
}
