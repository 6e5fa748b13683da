//! The CUDA device's state by concern, so that an op borrows the part it reads apart from the
//! part it writes: the libraries' handles and compiled kernels ([`Libs`], fixed once the
//! device is open, with cuBLAS's workspace), the prepared model's device memory ([`Memory`])
//! and the host's staging of each execution's rows ([`Host`]).

use super::*;

/// The CUDA libraries' handles and the compiled kernels.
pub(super) struct Libs {
    /// Held so the context outlives every buffer (the stream holds it too); made current on
    /// the calling thread before the raw cuDNN and cuBLASLt calls.
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) blas: CudaBlas,
    /// cuBLAS's workspace (declared after `blas`, so that it outlives the handle).
    pub(super) _blas_workspace: CudaSlice<u8>,
    /// cuBLASLt, for linear layers.
    pub(super) lt: blaslt::Lt,
    /// cuDNN, on the cuDNN convolution path (None on the im2col path).
    pub(super) dnn: Option<dnn::Dnn>,
    pub(super) conv_path: ConvPath,
    /// Why `--conv auto` chose im2col, when it did.
    pub(super) conv_note: Option<String>,
    pub(super) funcs: HashMap<String, CudaFunction>,
}

/// The prepared model's device memory: its layout, every node's buffers, the scratch.
pub(super) struct Memory {
    pub(super) layout: Option<Layout>,
    pub(super) model_name: String,
    pub(super) nodes: Vec<NodeGpu>,
    pub(super) scratch: Option<Scratch>,
    pub(super) s16: Option<Scratch16>,
    pub(super) max_dec: usize,
}

impl Memory {
    /// The prepared layout (an internal error before `prepare`).
    pub(super) fn layout(&self) -> Result<&Layout> {
        self.layout.as_ref().ok_or_else(|| missing("layout"))
    }

    /// Node `i`'s output width in the prepared layout.
    pub(super) fn feat(&self, i: usize) -> Result<usize> {
        Ok(self.layout()?.nodes[i].feat)
    }
}

/// Host-side staging, reused from one execution to the next.
pub(super) struct Host {
    pub(super) segs: Vec<Seg>,
    pub(super) staged: Staged,
    pub(super) host_i32: Vec<i32>,
    pub(super) host_i64: Vec<i64>,
    pub(super) host_i64b: Vec<i64>,
    pub(super) host_in: Vec<f32>,
}

/// Gives cuBLAS a workspace of its own, allocated once (its API reference recommends 32 MiB on
/// Hopper, 4 MiB before). Without one, cuBLAS releases before 12.2 allocate one per CUDA-graph
/// capture (PyTorch #83461), which would be device memory allocated while serving. Runs with
/// and without CUDA graphs get the same workspace, since it bounds which algorithms cuBLAS may
/// pick.
pub(super) fn blas_workspace(
    blas: &CudaBlas,
    stream: &Arc<CudaStream>,
    major: i32,
) -> Result<CudaSlice<u8>> {
    let bytes = if major >= 9 { 32 << 20 } else { 4 << 20 };
    let ws = stream.alloc_zeros::<u8>(bytes).map_err(cuda_err)?;
    let (ptr, guard) = ws.device_ptr(stream);
    // SAFETY: the workspace is a live device allocation of `bytes` bytes, kept by the device
    // as long as the handle that uses it.
    unsafe {
        cudarc::cublas::sys::cublasSetWorkspace_v2(
            *blas.handle(),
            ptr as *mut std::ffi::c_void,
            bytes,
        )
    }
    .result()
    .map_err(cuda_err)?;
    drop(guard);
    Ok(ws)
}
