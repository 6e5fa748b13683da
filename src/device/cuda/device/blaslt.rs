//! Linear layers through cuBLASLt, with the bias and a ReLU or GELU fused into the GEMM's
//! epilogue (`CUBLASLT_EPILOGUE_RELU_BIAS`, `GELU_BIAS`, `BIAS`; another activation runs after
//! it as one kernel). f32 computes in f32 (`CUBLAS_COMPUTE_32F`, no TF32), `--precision tf32`
//! in TF32, f16 multiplies f16 weights by the activations converted to f16 and writes f32 with
//! f32 accumulation (A/B `CUDA_R_16F`, C/D `CUDA_R_32F`), so no conversion follows the GEMM.
//!
//! A plan — the matmul descriptor (transposes, epilogue, the node's bias pointer), the three
//! matrix layouts and the algorithm cuBLASLt's heuristic ranks first — is made the first time
//! a node runs at a row count with its operands at given alignments, then kept: host work only,
//! since the workspace (32 MiB on Hopper, 4 MiB before, as cuBLAS recommends) is allocated with
//! the device. Row-major `Y[rows × feat] = X[rows × k] · W[k × feat]` is cuBLASLt's column-major
//! `Yᵀ = Wᵀ · Xᵀ`: its A is the weights, its B the activations, so the bias runs along its rows.

use super::*;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys as ls;
use cudarc::driver::DevicePtrMut;

/// A cuBLASLt call that failed, with what it was doing.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {status:?}")]
pub(crate) struct LtError {
    what: String,
    status: ls::cublasStatus_t,
}

fn fail(what: impl Into<String>) -> impl FnOnce(lt::CublasError) -> Error {
    let what = what.into();
    move |e| Error::DeviceFailed {
        device: "cuda".into(),
        source: Box::new(LtError { what, status: e.0 }),
    }
}

guard!(LtHandle, ls::cublasLtHandle_t, lt::destroy_handle);
guard!(MatDesc, ls::cublasLtMatmulDesc_t, lt::destroy_matmul_desc);
guard!(
    MatLayout,
    ls::cublasLtMatrixLayout_t,
    lt::destroy_matrix_layout
);
guard!(
    Pref,
    ls::cublasLtMatmulPreference_t,
    lt::destroy_matmul_pref
);

/// The element type of the weights and the activations they multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Ab {
    F32,
    F16,
}

/// What identifies a plan: the node, its rows, and the alignment (bytes, up to 256) of its
/// weights, activations and output, which bound the algorithms cuBLASLt may choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    node: usize,
    rows: usize,
    align: [u32; 3],
}

/// One linear layer's GEMM, as [`Lt::linear`] runs it.
pub(super) struct LinearGemm {
    /// The node (the plan cache's key).
    pub(super) node: usize,
    /// Rows of the sub-batch, output features, input features.
    pub(super) rows: usize,
    pub(super) feat: usize,
    pub(super) k: usize,
    /// The weights are a tied table `[feat × k]`, read transposed (else `[k × feat]`).
    pub(super) tied: bool,
    pub(super) ab: Ab,
    pub(super) act: Act,
}

/// A made plan.
struct Plan {
    desc: MatDesc,
    a: MatLayout,
    b: MatLayout,
    c: MatLayout,
    algo: ls::cublasLtMatmulAlgo_t,
    workspace: usize,
    /// The epilogue applies the layer's activation (else a kernel does).
    act_fused: bool,
}

// SAFETY: see `guard!`: the algorithm is plain data, the rest guards.
unsafe impl Send for Plan {}

/// The device's cuBLASLt handle, workspace and plans.
pub(super) struct Lt {
    handle: LtHandle,
    workspace: CudaSlice<u8>,
    compute: ls::cublasComputeType_t,
    plans: HashMap<Key, Plan>,
}

/// The largest power of two, up to 256, dividing a device address.
fn alignment(ptr: u64) -> u32 {
    1 << ptr.trailing_zeros().min(8)
}

impl Lt {
    /// A handle and its workspace on `stream` (Hopper and later: 32 MiB, else 4 MiB).
    pub(super) fn new(stream: &Arc<CudaStream>, major: i32, precision: Precision) -> Result<Lt> {
        let handle = LtHandle(lt::create_handle().map_err(fail("cublasLtCreate"))?);
        let bytes = if major >= 9 { 32 << 20 } else { 4 << 20 };
        let workspace = stream.alloc_zeros::<u8>(bytes).map_err(cuda_err)?;
        let compute = match precision {
            Precision::F32 | Precision::F16 => ls::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            Precision::Tf32 => ls::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        };
        Ok(Lt {
            handle,
            workspace,
            compute,
            plans: HashMap::new(),
        })
    }

    /// Forgets every plan (their bias pointers die with a re-prepare's buffers).
    pub(super) fn clear(&mut self) {
        self.plans.clear();
    }

    /// Plans made so far.
    pub(super) fn plans(&self) -> usize {
        self.plans.len()
    }

    /// `y = act(x · w + bias)` for `g.rows` rows (see the module's paragraph). `w` holds the
    /// weights in `g.ab`, `x` the activations in the same type; returns whether the epilogue
    /// applied the activation (else the caller does).
    pub(super) fn linear(
        &mut self,
        stream: &Arc<CudaStream>,
        g: &LinearGemm,
        (w, x): (u64, u64),
        y: &mut CudaViewMut<f32>,
        bias: Option<&CudaSlice<f32>>,
    ) -> Result<bool> {
        let (yp, _gy) = y.device_ptr_mut(stream);
        let bias_ptr = bias.map(|b| b.device_ptr(stream));
        let key = Key {
            node: g.node,
            rows: g.rows,
            align: [alignment(w), alignment(x), alignment(yp)],
        };
        let plan = match self.plans.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(make_plan(
                &self.handle,
                self.compute,
                self.workspace.len(),
                g,
                key.align,
                bias_ptr.as_ref().map(|b| b.0),
            )?),
        };
        if plan.workspace > self.workspace.len() {
            return Err(Error::Internal(format!(
                "cuda device: cuBLASLt workspace of {} bytes, the algorithm needs {}",
                self.workspace.len(),
                plan.workspace
            )));
        }
        let (wsp, _gws) = self.workspace.device_ptr_mut(stream);
        let (one, zero) = (1.0f32, 0.0f32);
        // SAFETY: the layouts describe the node's weights, the sub-batch's rows and its output
        // rows, all inside buffers sized at prepare; C is D, read with beta = 0; the workspace
        // holds what the algorithm asked for.
        unsafe {
            lt::matmul(
                self.handle.0,
                plan.desc.0,
                (&one as *const f32).cast(),
                (&zero as *const f32).cast(),
                w as *const std::ffi::c_void,
                plan.a.0,
                x as *const std::ffi::c_void,
                plan.b.0,
                yp as *const std::ffi::c_void,
                plan.c.0,
                yp as *mut std::ffi::c_void,
                plan.c.0,
                &plan.algo,
                wsp as *mut std::ffi::c_void,
                plan.workspace,
                stream.cu_stream() as ls::cudaStream_t,
            )
        }
        .map_err(fail(format!(
            "cublasLtMatmul (node {}, {} rows)",
            g.node, g.rows
        )))?;
        Ok(plan.act_fused)
    }
}

/// The epilogue for a layer with or without a bias and its activation, and whether it applies
/// the activation.
fn epilogue(bias: bool, act: Act) -> (ls::cublasLtEpilogue_t, bool) {
    use ls::cublasLtEpilogue_t as E;
    match (bias, act) {
        (true, Act::Relu) => (E::CUBLASLT_EPILOGUE_RELU_BIAS, true),
        (true, Act::Gelu) => (E::CUBLASLT_EPILOGUE_GELU_BIAS, true),
        (true, Act::None) => (E::CUBLASLT_EPILOGUE_BIAS, true),
        (true, Act::Relu6 | Act::GeluErf | Act::Tanh | Act::Sigmoid) => {
            (E::CUBLASLT_EPILOGUE_BIAS, false)
        }
        (false, Act::Relu) => (E::CUBLASLT_EPILOGUE_RELU, true),
        (false, Act::Gelu) => (E::CUBLASLT_EPILOGUE_GELU, true),
        (false, Act::None) => (E::CUBLASLT_EPILOGUE_DEFAULT, true),
        (false, Act::Relu6 | Act::GeluErf | Act::Tanh | Act::Sigmoid) => {
            (E::CUBLASLT_EPILOGUE_DEFAULT, false)
        }
    }
}

/// Sets one attribute of a cuBLASLt descriptor from a plain value.
macro_rules! set_attr {
    ($f:path, $obj:expr, $attr:expr, $v:expr, $what:expr) => {{
        let v = $v;
        // SAFETY: a live descriptor; the value is the attribute's documented type.
        unsafe {
            $f(
                $obj,
                $attr,
                (&v as *const _ as *const std::ffi::c_void),
                std::mem::size_of_val(&v),
            )
        }
        .map_err(fail($what))
    }};
}

/// Makes the plan of `g` with operands at `align` and the bias at `bias`.
fn make_plan(
    handle: &LtHandle,
    compute: ls::cublasComputeType_t,
    max_workspace: usize,
    g: &LinearGemm,
    align: [u32; 3],
    bias: Option<u64>,
) -> Result<Plan> {
    use ls::cublasLtMatmulDescAttributes_t as D;
    use ls::cublasLtMatmulPreferenceAttributes_t as P;
    let what = |call: &str| format!("{call} (node {}, {} rows)", g.node, g.rows);
    let ab = match g.ab {
        Ab::F32 => ls::cudaDataType_t::CUDA_R_32F,
        Ab::F16 => ls::cudaDataType_t::CUDA_R_16F,
    };
    let (m, n, k) = (g.feat as u64, g.rows as u64, g.k as u64);
    let layout = |t, rows: u64, cols: u64, ld: u64| -> Result<MatLayout> {
        Ok(MatLayout(
            lt::create_matrix_layout(t, rows, cols, ld as i64)
                .map_err(fail(what("cublasLtMatrixLayoutCreate")))?,
        ))
    };
    // A: the weights, m × k (a tied table is stored k × m and read transposed)
    let a = if g.tied {
        layout(ab, k, m, k)?
    } else {
        layout(ab, m, k, m)?
    };
    let b = layout(ab, k, n, k)?;
    let c = layout(ls::cudaDataType_t::CUDA_R_32F, m, n, m)?;
    let desc = MatDesc(
        lt::create_matmul_desc(compute, ls::cudaDataType_t::CUDA_R_32F)
            .map_err(fail(what("cublasLtMatmulDescCreate")))?,
    );
    let (ep, act_fused) = epilogue(bias.is_some(), g.act);
    let f = lt::set_matmul_desc_attribute;
    set_attr!(
        f,
        desc.0,
        D::CUBLASLT_MATMUL_DESC_TRANSA,
        i32::from(g.tied),
        what("TRANSA")
    )?;
    set_attr!(
        f,
        desc.0,
        D::CUBLASLT_MATMUL_DESC_TRANSB,
        0i32,
        what("TRANSB")
    )?;
    set_attr!(
        f,
        desc.0,
        D::CUBLASLT_MATMUL_DESC_EPILOGUE,
        ep as u32,
        what("EPILOGUE")
    )?;
    if let Some(p) = bias {
        set_attr!(
            f,
            desc.0,
            D::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
            p,
            what("BIAS_POINTER")
        )?;
    }
    let pref =
        Pref(lt::create_matmul_pref().map_err(fail(what("cublasLtMatmulPreferenceCreate")))?);
    let f = lt::set_matmul_pref_attribute;
    let ws = max_workspace as u64;
    set_attr!(
        f,
        pref.0,
        P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        ws,
        what("MAX_WORKSPACE")
    )?;
    for (attr, a) in [
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0]),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1]),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]),
    ] {
        set_attr!(f, pref.0, attr, a, what("MIN_ALIGNMENT"))?;
    }
    // SAFETY: live handle, descriptor, layouts and preference.
    let h = unsafe { lt::get_matmul_algo_heuristic(handle.0, desc.0, a.0, b.0, c.0, c.0, pref.0) }
        .map_err(fail(what("cublasLtMatmulAlgoGetHeuristic")))?;
    Ok(Plan {
        desc,
        a,
        b,
        c,
        algo: h.algo,
        workspace: h.workspaceSize,
        act_fused,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epilogues_fuse_relu_gelu_and_bias_and_leave_the_rest_to_a_kernel() {
        use ls::cublasLtEpilogue_t as E;
        assert_eq!(
            epilogue(true, Act::Relu),
            (E::CUBLASLT_EPILOGUE_RELU_BIAS, true)
        );
        assert_eq!(
            epilogue(true, Act::Gelu),
            (E::CUBLASLT_EPILOGUE_GELU_BIAS, true)
        );
        assert_eq!(
            epilogue(false, Act::None),
            (E::CUBLASLT_EPILOGUE_DEFAULT, true)
        );
        // the exact (erf) GELU is not cuBLASLt's tanh form: a kernel applies it
        assert_eq!(
            epilogue(true, Act::GeluErf),
            (E::CUBLASLT_EPILOGUE_BIAS, false)
        );
        assert_eq!(
            epilogue(false, Act::Tanh),
            (E::CUBLASLT_EPILOGUE_DEFAULT, false)
        );
    }

    #[test]
    fn alignment_is_the_largest_power_of_two_up_to_256() {
        assert_eq!(alignment(0x7f00_0000_0000), 256);
        assert_eq!(alignment(0x7f00_0000_0104), 4);
        assert_eq!(alignment(0x7f00_0000_0180), 128);
    }
}
