//! A convolution through cuDNN's legacy API (`--conv cudnn-legacy`): a filter and a
//! convolution descriptor (groups, math type: FMA in f32, cuDNN's default in TF32, tensor cores
//! in f16) per node and, per sub-batch size, the input and output tensor descriptors and the
//! algorithm cuDNN's v7 heuristics rank first among those whose workspace fits the cap. A ReLU
//! convolution at f32 is one `cudnnConvolutionBiasActivationForward` (convolution, shift and
//! ReLU fused); any other is `cudnnConvolutionForward`. Measured on an H200 with cuDNN 9.14,
//! a convolution costs 70–125 µs more host time this way than on the im2col path
//! (docs/gpu/README.md), which the graph API (`dnn_graph.rs`), the default, does not.

use super::dnn::{dim, fail, ConvSpec, Data, Dnn, Handle, Ptrs, WORKSPACE_CAP};
use super::*;
use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys as ds;

guard!(
    Tensor,
    ds::cudnnTensorDescriptor_t,
    dnn::destroy_tensor_descriptor
);
guard!(
    Filter,
    ds::cudnnFilterDescriptor_t,
    dnn::destroy_filter_descriptor
);
guard!(
    ConvDesc,
    ds::cudnnConvolutionDescriptor_t,
    dnn::destroy_convolution_descriptor
);
guard!(ActDesc, ds::cudnnActivationDescriptor_t, destroy_activation);

/// `cudnnDestroyActivationDescriptor` (cudarc's result module has no wrapper for it).
///
/// # Safety
/// `d` was made by `cudnnCreateActivationDescriptor` and is destroyed once.
unsafe fn destroy_activation(d: ds::cudnnActivationDescriptor_t) -> Result<(), dnn::CudnnError> {
    ds::cudnnDestroyActivationDescriptor(d).result()
}

/// One sub-batch size's descriptors and algorithm.
struct BatchPlan {
    x: Tensor,
    y: Tensor,
    algo: ds::cudnnConvolutionFwdAlgo_t,
    workspace: usize,
}

/// The fused call's bias: its descriptor, its values (the shift, or zeros) and the ReLU.
struct Fused {
    desc: Tensor,
    bias: CudaSlice<f32>,
    relu: ActDesc,
}

/// A convolution node's legacy descriptors and per-batch algorithms.
pub(super) struct Legacy {
    data: Data,
    filter: Filter,
    conv: ConvDesc,
    fused: Option<Fused>,
    batches: Vec<BatchPlan>,
    chw: (usize, usize, usize),
    out_chw: (usize, usize, usize),
}

impl Legacy {
    /// The descriptors and algorithms of one convolution at 1 to `max_batch` images.
    pub(super) fn new(
        dnn: &Dnn,
        stream: &Arc<CudaStream>,
        spec: &ConvSpec,
        max_batch: usize,
        precision: Precision,
    ) -> Result<Legacy> {
        let ConvSpec {
            name,
            chw,
            out_chw,
            kernel: (kh, kw),
            stride,
            padding,
            groups,
            act,
            weights,
        } = *spec;
        let at = |what: &str| format!("{what} for convolution '{name}'");
        let data = super::dnn::data_of(precision);
        let d = |v: usize, what: &str| dim(v, what, name);
        let (c, co) = (chw.0, out_chw.0);
        let filter = Filter(dnn::create_filter_descriptor().map_err(fail(at("filter")))?);
        // SAFETY: a live descriptor.
        unsafe {
            dnn::set_filter4d_descriptor(
                filter.0,
                data.dtype(),
                ds::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                [
                    d(co, "channels")?,
                    d(c / groups, "channels")?,
                    d(kh, "kernel")?,
                    d(kw, "kernel")?,
                ],
            )
        }
        .map_err(fail(at("filter")))?;
        let conv = ConvDesc(dnn::create_convolution_descriptor().map_err(fail(at("conv")))?);
        let math = match precision {
            Precision::F32 => ds::cudnnMathType_t::CUDNN_FMA_MATH,
            Precision::Tf32 => ds::cudnnMathType_t::CUDNN_DEFAULT_MATH,
            Precision::F16 => ds::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
        };
        let (p, s) = (d(padding, "padding")?, d(stride, "stride")?);
        let g = d(groups, "groups")?;
        // SAFETY: a live descriptor; f32 accumulation at every precision.
        let set = || unsafe {
            dnn::set_convolution2d_descriptor(
                conv.0,
                p,
                p,
                s,
                s,
                1,
                1,
                ds::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                ds::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )?;
            dnn::set_convolution_group_count(conv.0, g)?;
            dnn::set_convolution_math_type(conv.0, math)
        };
        set().map_err(fail(at("convolution descriptor")))?;
        let fused = if data == Data::F32 && act == Act::Relu {
            let desc = Tensor(dnn::create_tensor_descriptor().map_err(fail(at("bias")))?);
            // SAFETY: a live descriptor.
            unsafe {
                dnn::set_tensor4d_descriptor(
                    desc.0,
                    ds::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    data.dtype(),
                    [1, d(co, "channels")?, 1, 1],
                )
            }
            .map_err(fail(at("bias")))?;
            let bias = if weights.shift.is_empty() {
                stream.alloc_zeros::<f32>(co).map_err(cuda_err)?
            } else {
                stream.clone_htod(&weights.shift).map_err(cuda_err)?
            };
            Some(Fused {
                desc,
                bias,
                relu: relu()?,
            })
        } else {
            None
        };
        let mut l = Legacy {
            data,
            filter,
            conv,
            fused,
            batches: Vec::with_capacity(max_batch),
            chw,
            out_chw,
        };
        for n in 1..=max_batch {
            let bp = l.batch(dnn, name, n)?;
            l.batches.push(bp);
        }
        Ok(l)
    }

    /// The descriptors and algorithm for `n` images.
    fn batch(&self, dnn: &Dnn, name: &str, n: usize) -> Result<BatchPlan> {
        let at = |what: &str| format!("{what} for convolution '{name}' at {n} images");
        let d = |v: usize, what: &str| dim(v, what, name);
        let tensor = |(c, h, w): (usize, usize, usize)| -> Result<Tensor> {
            let t = Tensor(dnn::create_tensor_descriptor().map_err(fail(at("tensor")))?);
            // SAFETY: a live descriptor.
            unsafe {
                dnn::set_tensor4d_descriptor(
                    t.0,
                    ds::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    self.data.dtype(),
                    [
                        d(n, "images")?,
                        d(c, "channels")?,
                        d(h, "height")?,
                        d(w, "width")?,
                    ],
                )
            }
            .map_err(fail(at("tensor")))?;
            Ok(t)
        };
        let (x, y) = (tensor(self.chw)?, tensor(self.out_chw)?);
        // cuDNN's output shape must be the model's
        let mut dims = [0i32; 4];
        // SAFETY: live descriptors; writes four ints.
        unsafe {
            ds::cudnnGetConvolution2dForwardOutputDim(
                self.conv.0,
                x.0,
                self.filter.0,
                &mut dims[0],
                &mut dims[1],
                &mut dims[2],
                &mut dims[3],
            )
        }
        .result()
        .map_err(fail(at("output shape")))?;
        let (co, ho, wo) = self.out_chw;
        if dims != [n as i32, co as i32, ho as i32, wo as i32] {
            return Err(Error::Internal(format!(
                "cuDNN computes {dims:?} for convolution '{name}' at {n} images, the model {:?}",
                [n, co, ho, wo]
            )));
        }
        const RANKED: usize = 8;
        // SAFETY: a zeroed perf struct is valid (every enum has a zero variant); cuDNN writes
        // at most RANKED of them.
        let mut perf: [ds::cudnnConvolutionFwdAlgoPerf_t; RANKED] = unsafe { std::mem::zeroed() };
        let mut count = 0;
        // SAFETY: live handle and descriptors; room for RANKED results.
        unsafe {
            dnn::get_convolution_forward_algorithm(
                dnn.handle.0,
                x.0,
                self.filter.0,
                self.conv.0,
                y.0,
                RANKED as i32,
                &mut count,
                perf.as_mut_ptr(),
            )
        }
        .map_err(fail(at("cudnnGetConvolutionForwardAlgorithm_v7")))?;
        let ranked = &perf[..(count.max(0) as usize).min(RANKED)];
        for p in ranked {
            if p.status != ds::cudnnStatus_t::CUDNN_STATUS_SUCCESS || p.memory > WORKSPACE_CAP {
                continue;
            }
            // SAFETY: live handle and descriptors.
            let ws = unsafe {
                dnn::get_convolution_forward_workspace_size(
                    dnn.handle.0,
                    x.0,
                    self.filter.0,
                    self.conv.0,
                    y.0,
                    p.algo,
                )
            }
            .map_err(fail(at("cudnnGetConvolutionForwardWorkspaceSize")))?;
            if ws > WORKSPACE_CAP {
                continue;
            }
            return Ok(BatchPlan {
                x,
                y,
                algo: p.algo,
                workspace: ws.max(p.memory),
            });
        }
        Err(Error::DeviceFailed {
            device: "cuda".into(),
            source: format!(
                "cuDNN offers no algorithm for convolution '{name}' at {n} images within a {} MiB workspace ({} ranked: {:?})",
                WORKSPACE_CAP >> 20,
                ranked.len(),
                ranked.iter().map(|p| (p.algo, p.status, p.memory)).collect::<Vec<_>>()
            )
            .into(),
        })
    }

    /// The largest workspace any of its sub-batch sizes needs.
    pub(super) fn workspace(&self) -> usize {
        self.batches.iter().map(|b| b.workspace).max().unwrap_or(0)
    }

    /// The algorithm chosen for sub-batch size index `i` (`n − 1`).
    pub(super) fn algorithm(&self, i: usize) -> Option<String> {
        self.batches.get(i).map(|b| format!("{:?}", b.algo))
    }

    /// The call for sub-batch size index `i` at `ptrs`; whether it applied the shift and ReLU.
    pub(super) fn run(
        &self,
        handle: &Handle,
        i: usize,
        stream: &Arc<CudaStream>,
        ptrs: &Ptrs,
    ) -> Result<bool> {
        let bp = self
            .batches
            .get(i)
            .ok_or_else(|| missing("cuDNN plan for this sub-batch size"))?;
        if ptrs.ws.1 < bp.workspace {
            return Err(Error::Internal(format!(
                "cuda device: cuDNN workspace of {} bytes, the algorithm needs {}",
                ptrs.ws.1, bp.workspace
            )));
        }
        let what = |call: &str| format!("{call} ({} images, {:?})", i + 1, bp.algo);
        let ws = if bp.workspace == 0 {
            std::ptr::null_mut()
        } else {
            ptrs.ws.0 as *mut std::ffi::c_void
        };
        let (one, zero) = (1.0f32, 0.0f32);
        let (x, w, y) = (
            ptrs.x as *const std::ffi::c_void,
            ptrs.w as *const std::ffi::c_void,
            ptrs.y as *mut std::ffi::c_void,
        );
        match &self.fused {
            Some(f) => {
                let (b, _gb) = f.bias.device_ptr(stream);
                // SAFETY: descriptors made for these shapes at this size; y is also z, read
                // with alpha2 = 0; the workspace holds what the algorithm asked for.
                unsafe {
                    dnn::convolution_bias_activation_forward(
                        handle.0,
                        (&one as *const f32).cast(),
                        bp.x.0,
                        x,
                        self.filter.0,
                        w,
                        self.conv.0,
                        bp.algo,
                        ws,
                        bp.workspace,
                        (&zero as *const f32).cast(),
                        bp.y.0,
                        y,
                        f.desc.0,
                        b as *const std::ffi::c_void,
                        f.relu.0,
                        bp.y.0,
                        y,
                    )
                }
                .map_err(fail(what("cudnnConvolutionBiasActivationForward")))?;
                Ok(true)
            }
            None => {
                // SAFETY: as above.
                unsafe {
                    dnn::convolution_forward(
                        handle.0,
                        (&one as *const f32).cast(),
                        bp.x.0,
                        x,
                        self.filter.0,
                        w,
                        self.conv.0,
                        bp.algo,
                        ws,
                        bp.workspace,
                        (&zero as *const f32).cast(),
                        bp.y.0,
                        y,
                    )
                }
                .map_err(fail(what("cudnnConvolutionForward")))?;
                Ok(false)
            }
        }
    }
}

/// A ReLU activation descriptor for the fused call.
fn relu() -> Result<ActDesc> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: writes one descriptor handle.
    unsafe { ds::cudnnCreateActivationDescriptor(&mut raw) }
        .result()
        .map_err(fail("cudnnCreateActivationDescriptor"))?;
    let relu = ActDesc(raw);
    // SAFETY: a live descriptor; ReLU ignores the coefficient.
    unsafe {
        dnn::set_activation_descriptor(
            relu.0,
            ds::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU,
            ds::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
            0.0,
        )
    }
    .map_err(fail("cudnnSetActivationDescriptor"))?;
    Ok(relu)
}
