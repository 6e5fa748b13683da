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
    /// The largest input node's output (values): what a front end's inputs are staged in.
    pub(super) input_len: usize,
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
    /// Page-locked staging of a front end's inputs (see [`Pinned`]), once one is served.
    pub(super) pinned: Option<Pinned>,
}

/// Page-locked host memory that a front end's inputs are staged in, so that their copy to the
/// card is one asynchronous DMA a run of rows (from pageable memory the driver copies through a
/// buffer of its own first), with an event recorded after the copies: the values are written
/// again only once it has passed.
pub(super) struct Pinned {
    values: PinnedHostSlice<f32>,
    /// The values' host address, taken once (cudarc's accessor waits on an event of its own
    /// each time, a blocking call per node on the stand-in's count; ours is `copied`).
    ptr: *mut f32,
    copied: Option<CudaEvent>,
}

// SAFETY: `ptr` points into `values`, which the struct owns and which cudarc allows to move
// between threads; it is dereferenced only through `&mut self`.
unsafe impl Send for Pinned {}

impl Pinned {
    /// `len` values of page-locked memory.
    pub(super) fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Pinned> {
        // SAFETY: the values are written before they are read (write-combined memory: the host
        // writes it and the card reads it, as here).
        let mut values = unsafe { ctx.alloc_pinned::<f32>(len.max(1)) }.map_err(cuda_err)?;
        let ptr = values.as_mut_ptr().map_err(cuda_err)?;
        Ok(Pinned {
            values,
            ptr,
            copied: None,
        })
    }

    /// How many values it holds.
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// The values to write, once the last copies out of them are done (they are as a rule:
    /// every node ends in a sync; a query, not a wait, says so).
    pub(super) fn writable(&mut self) -> Result<&mut [f32]> {
        if let Some(e) = self.copied.take() {
            if !e.is_complete() {
                e.synchronize().map_err(cuda_err)?;
            }
        }
        // SAFETY: `ptr` is the start of `values`' `len()` values, alive as long as `self`, and
        // no copy reads them any more (above); the borrow of `self` keeps the slice unique.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.values.len()) })
    }

    /// Marks the copies just enqueued on `stream`.
    pub(super) fn copied(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        self.copied = Some(stream.record_event(None).map_err(cuda_err)?);
        Ok(())
    }
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
