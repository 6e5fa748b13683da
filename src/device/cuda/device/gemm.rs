//! GEMMs on cuBLAS: row-major operands (a tied table transposed), f32 or f16 storage with f32 accumulation, one call or strided-batched over images.

use super::*;
use std::ops::RangeBounds;

/// What a GEMM uses of the device: cuBLAS, the stream, the precision-conversion kernels and
/// the f16 scratch (at f16 precision only).
pub(super) struct Units<'a> {
    pub(super) s16: Option<&'a mut Scratch16>,
    pub(super) blas: &'a CudaBlas,
    pub(super) stream: &'a Arc<CudaStream>,
    pub(super) funcs: &'a HashMap<String, CudaFunction>,
}

impl GpuWeights {
    /// The weights as a GEMM operand: the f16 copy where there is one (f16 precision), else
    /// f32; elements `range` of it. `what` names them in the error when there are none.
    pub(super) fn gemm_operand(
        &self,
        range: impl RangeBounds<usize>,
        what: &str,
    ) -> Result<Operand<'_>> {
        Ok(match (&self.w16, &self.w) {
            (Some(h), _) => Operand::H(h.slice(range)),
            (None, Some(f)) => Operand::F(f.slice(range)),
            (None, None) => return Err(missing(what)),
        })
    }
}

/// Converts `len` floats of `x` to f16 into `y`.
pub(super) fn to_f16(
    stream: &CudaStream,
    funcs: &HashMap<String, CudaFunction>,
    x: &CudaView<f32>,
    y: &mut CudaSlice<half::f16>,
    len: usize,
) -> Result<()> {
    let f = funcs
        .get("f32_to_f16")
        .ok_or_else(|| missing("f32_to_f16"))?;
    let nn = len as i64;
    let mut y = y.slice_mut(..len);
    let mut l = stream.launch_builder(f);
    l.arg(x).arg(&mut y).arg(&nn);
    // SAFETY: len elements in both.
    unsafe { l.launch(elems(len)) }.map_err(cuda_err)?;
    Ok(())
}

impl CudaDevice {
    /// Row-major `C[m×n] = op(A)[m×k] · op(B)[k×n]` in cuBLAS (column-major, see [`row_major`]),
    /// `batch.count` times with operands `batch.a`/`batch.b`/`batch.c` elements apart (one call:
    /// a strided-batched GEMM when the count exceeds one): `a_t`/`b_t` mean the buffer holds the
    /// operand transposed; `lda`/`ldb`/`ldc` are row strides. f32 operands go straight to
    /// cuBLAS; with an f16 operand, the f32 one is converted to f16 scratch, cuBLAS multiplies f16
    /// with f32 accumulation into compact f16 scratch, and the result is converted back into `c`.
    pub(super) fn gemm_p(
        units: Units,
        (m, n, k): (usize, usize, usize),
        (a, a_t, lda): (Operand, bool, usize),
        (b, b_t, ldb): (Operand, bool, usize),
        (c, ldc): (&mut cudarc::driver::CudaViewMut<f32>, usize),
        batch: Strides,
    ) -> Result<()> {
        let Units {
            s16,
            blas,
            stream,
            funcs,
        } = units;
        if let (Operand::F(a), Operand::F(b)) = (&a, &b) {
            let cfg = row_major((m, n, k), (a_t, lda), (b_t, ldb), ldc, (1.0f32, 0.0f32));
            // SAFETY: sizes, strides and batch strides describe ranges of buffers sized from the
            // model at prepare.
            return if batch.count == 1 {
                unsafe { blas.gemm(cfg, b, a, c) }
            } else {
                unsafe { blas.gemm_strided_batched(batch.config(cfg), b, a, c) }
            }
            .map_err(cuda_err);
        }
        let s16 = s16.ok_or_else(|| missing("f16 scratch"))?;
        let to16 = funcs
            .get("f32_to_f16")
            .ok_or_else(|| missing("f32_to_f16"))?;
        let to32 = funcs
            .get("f16_to_f32")
            .ok_or_else(|| missing("f16_to_f32"))?;
        let last = batch.count - 1;
        let a_len = last * batch.a + if a_t { k * lda } else { m * lda };
        let b_len = last * batch.b + if b_t { n * ldb } else { k * ldb };
        let convert =
            |x: &cudarc::driver::CudaView<f32>, y: &mut CudaSlice<half::f16>, len: usize| {
                let nn = len as i64;
                let mut y = y.slice_mut(..len);
                let mut l = stream.launch_builder(to16);
                l.arg(x).arg(&mut y).arg(&nn);
                // SAFETY: len elements in both.
                unsafe { l.launch(elems(len)) }
                    .map_err(cuda_err)
                    .map(|_| ())
            };
        if let Operand::F(x) = &a {
            convert(x, &mut s16.a, a_len)?;
        }
        if let Operand::F(x) = &b {
            convert(x, &mut s16.b, b_len)?;
        }
        let a16 = match &a {
            Operand::H(h) => h.slice(..),
            Operand::F(_) => s16.a.slice(..a_len),
        };
        let b16 = match &b {
            Operand::H(h) => h.slice(..),
            Operand::F(_) => s16.b.slice(..b_len),
        };
        // C in f16 scratch is compact: rows of n, GEMMs m·n apart
        let cfg = row_major(
            (m, n, k),
            (a_t, lda),
            (b_t, ldb),
            n,
            (half::f16::ONE, half::f16::ZERO),
        );
        let c_len = batch.count * m * n;
        {
            let mut c16 = s16.c.slice_mut(..c_len);
            let compact = Strides { c: m * n, ..batch };
            // SAFETY: as for the f32 call; cuBLAS accumulates in f32 (CUBLAS_COMPUTE_32F).
            if batch.count == 1 {
                unsafe { blas.gemm(cfg, &b16, &a16, &mut c16) }
            } else {
                unsafe { blas.gemm_strided_batched(compact.config(cfg), &b16, &a16, &mut c16) }
            }
            .map_err(cuda_err)?;
        }
        // back into c: rows of n, ldc apart, GEMMs batch.c apart
        let convert_back = |from: usize,
                            len: usize,
                            block: usize,
                            stride: usize,
                            c: &mut cudarc::driver::CudaViewMut<f32>,
                            to: usize| {
            let (nn, bl, st) = (len as i64, block as i64, stride as i64);
            let c16 = s16.c.slice(from..from + len);
            let mut cv = c.slice_mut(to..);
            let mut l = stream.launch_builder(to32);
            l.arg(&c16).arg(&mut cv).arg(&nn).arg(&bl).arg(&st);
            // SAFETY: len halves in, blocks of `block` floats `stride` apart out, within c.
            unsafe { l.launch(elems(len)) }
                .map_err(cuda_err)
                .map(|_| ())
        };
        if ldc == n {
            convert_back(0, c_len, m * n, batch.c, c, 0)?;
        } else if batch.count == 1 || batch.c == m * ldc {
            convert_back(0, c_len, n, ldc, c, 0)?;
        } else {
            for g in 0..batch.count {
                convert_back(g * m * n, m * n, n, ldc, c, g * batch.c)?;
            }
        }
        Ok(())
    }
}

/// The cuBLAS (column-major) configuration of the row-major product `C[m×n] = op(A)·op(B)`:
/// cuBLAS computes `Cᵀ = op(B)ᵀ·op(A)ᵀ`, so B comes first. `(t, ld)` per operand: whether the
/// buffer holds it transposed, and its row stride; `C = alpha·op(A)·op(B) + beta·C`.
pub(super) fn row_major<T>(
    (m, n, k): (usize, usize, usize),
    (a_t, lda): (bool, usize),
    (b_t, ldb): (bool, usize),
    ldc: usize,
    (alpha, beta): (T, T),
) -> GemmConfig<T> {
    let op = |t: bool| {
        if t {
            cublasOperation_t::CUBLAS_OP_T
        } else {
            cublasOperation_t::CUBLAS_OP_N
        }
    };
    GemmConfig {
        transa: op(b_t),
        transb: op(a_t),
        m: n as i32,
        n: m as i32,
        k: k as i32,
        alpha,
        lda: ldb as i32,
        ldb: lda as i32,
        beta,
        ldc: ldc as i32,
    }
}
