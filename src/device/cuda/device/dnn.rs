//! Convolutions through cuDNN (`--conv cudnn`, the default where libcudnn loads): per
//! convolution node, the filter in cuDNN's KCRS order with the folded batch norm's scale
//! multiplied in and, per sub-batch size from 1 to the maximum batch, an execution plan made at
//! [`Device::prepare`], with one workspace for the largest, so that serving only calls cuDNN.
//! Tensors are NCHW, the device's layout (an image's channels one after another).
//!
//! Two engines make the plans. cuDNN's graph API (`dnn_graph.rs`, the default): an operation
//! graph of one convolution, the engine configurations cuDNN's heuristics rank (mode A, then its
//! fallback list), and the first that finalizes into an execution plan within [`WORKSPACE_CAP`],
//! runs no runtime compilation and, in f32, no tensor cores (TF32); each call is one
//! `cudnnBackendExecute`, and the layer's shift and activation follow as one kernel. Its legacy
//! API (`dnn_legacy.rs`, `--conv cudnn-legacy`): descriptors and the algorithm the v7 heuristics
//! rank first; a ReLU convolution is one `cudnnConvolutionBiasActivationForward`. A convolution
//! for which the graph API offers no qualifying engine at some sub-batch size runs through the
//! legacy API at every size (`CudaDevice::conv_algorithm` says which).
//!
//! f32 computes in f32 (FMA math, no TF32, so that `verify` keeps the f32 tolerance) and TF32
//! under `--precision tf32`. f16: the images go to f16 scratch, cuDNN convolves on tensor cores
//! (f16 in and out, f32 accumulation), and one kernel (`channel_epilogue_h`) converts the output
//! back with its shift and activation.

use super::*;
use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys as ds;
use cudarc::driver::DevicePtrMut;

/// The most workspace one convolution's plan may take; cuDNN ranks algorithms (or engine
/// configurations), and the first whose workspace fits is taken. NCHW f16 convolutions on
/// tensor cores transpose their input and output in the workspace: VGG-16's first layers at
/// batch 64 need about 0.8 GB.
pub(super) const WORKSPACE_CAP: usize = 2 << 30;

/// How the CUDA device computes convolutions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPath {
    /// cuDNN's graph API (an execution plan per node and sub-batch size, made at prepare).
    Cudnn,
    /// cuDNN's legacy API (descriptors and the v7 heuristics' algorithm, chosen at prepare).
    CudnnLegacy,
    /// im2col and a strided-batched cuBLAS GEMM, then the channel epilogue.
    Im2col,
}

impl ConvPath {
    /// The name `--conv` takes for it.
    pub fn name(self) -> &'static str {
        match self {
            ConvPath::Cudnn => "cudnn",
            ConvPath::CudnnLegacy => "cudnn-legacy",
            ConvPath::Im2col => "im2col",
        }
    }

    /// Whether it runs in cuDNN.
    pub fn cudnn(self) -> bool {
        match self {
            ConvPath::Cudnn | ConvPath::CudnnLegacy => true,
            ConvPath::Im2col => false,
        }
    }
}

/// What `--conv` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvChoice {
    /// cuDNN where libcudnn loads, else im2col (with a notice).
    Auto,
    /// This path; cuDNN missing is an error.
    Path(ConvPath),
}

impl ConvChoice {
    /// Parses `auto`, `cudnn`, `cudnn-legacy` or `im2col`.
    pub fn parse(s: &str) -> Result<ConvChoice> {
        match s {
            "auto" => Ok(ConvChoice::Auto),
            "cudnn" => Ok(ConvChoice::Path(ConvPath::Cudnn)),
            "cudnn-legacy" => Ok(ConvChoice::Path(ConvPath::CudnnLegacy)),
            "im2col" => Ok(ConvChoice::Path(ConvPath::Im2col)),
            o => Err(Error::invalid(
                "--conv",
                format!("unknown convolution path '{o}' (auto, cudnn, cudnn-legacy, im2col)"),
            )),
        }
    }
}

/// A cuDNN call that failed, with what it was doing.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {status:?}")]
pub(crate) struct DnnError {
    what: String,
    status: ds::cudnnStatus_t,
}

/// Turns a cuDNN status into the device's error, saying what failed.
pub(super) fn fail(what: impl Into<String>) -> impl FnOnce(dnn::CudnnError) -> Error {
    let what = what.into();
    move |e| Error::DeviceFailed {
        device: "cuda".into(),
        source: Box::new(DnnError { what, status: e.0 }),
    }
}

guard!(pub(super) Handle, ds::cudnnHandle_t, dnn::destroy_handle);

/// The cuDNN handle of a device, on its stream, and the workspace of its plans.
pub(super) struct Dnn {
    pub(super) handle: Handle,
    /// cuDNN's version (e.g. 91900 for 9.19.0).
    pub(super) version: usize,
    /// The workspace of the largest plan made at prepare.
    workspace: Option<CudaSlice<u8>>,
}

impl Dnn {
    /// A handle on `stream` (whose context is current on this thread).
    pub(super) fn new(stream: &Arc<CudaStream>) -> Result<Dnn> {
        let handle = Handle(dnn::create_handle().map_err(fail("cudnnCreate"))?);
        // SAFETY: a live handle and the device's own stream.
        unsafe { dnn::set_stream(handle.0, stream.cu_stream() as ds::cudaStream_t) }
            .map_err(fail("cudnnSetStream"))?;
        Ok(Dnn {
            handle,
            version: dnn::get_version(),
            workspace: None,
        })
    }

    /// `major.minor.patch` of the loaded cuDNN.
    pub(super) fn version_string(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100)
    }

    /// Drops the workspace (before a re-prepare allocates the next).
    pub(super) fn clear(&mut self) {
        self.workspace = None;
    }

    /// Allocates the workspace for every plan made since the last [`Dnn::clear`].
    pub(super) fn allocate_workspace(
        &mut self,
        stream: &Arc<CudaStream>,
        bytes: usize,
    ) -> Result<()> {
        self.workspace = Some(stream.alloc_zeros::<u8>(bytes.max(1)).map_err(cuda_err)?);
        Ok(())
    }
}

/// The data a plan's tensors hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Data {
    F32,
    F16,
}

impl Data {
    pub(super) fn dtype(self) -> ds::cudnnDataType_t {
        match self {
            Data::F32 => ds::cudnnDataType_t::CUDNN_DATA_FLOAT,
            Data::F16 => ds::cudnnDataType_t::CUDNN_DATA_HALF,
        }
    }
}

/// A convolution's filter on the device.
enum Kcrs {
    F(CudaSlice<f32>),
    H(CudaSlice<half::f16>),
}

/// What made a node's per-batch plans.
enum Engine {
    Graph(Vec<dnn_graph::GraphPlan>),
    Legacy(dnn_legacy::Legacy),
}

/// A convolution node's cuDNN plan (see the module's paragraph).
pub(super) struct ConvPlan {
    weights: Kcrs,
    /// The shift (a folded batch norm's, or the bias), when the layer has one.
    shift: Option<CudaSlice<f32>>,
    /// The activation's code (kernels/common.cuh).
    act: i32,
    engine: Engine,
    /// Images in and out: channels, height, width.
    pub(super) chw: (usize, usize, usize),
    pub(super) out_chw: (usize, usize, usize),
}

/// What [`ConvPlan::new`] needs to know of a node.
pub(super) struct ConvSpec<'a> {
    pub(super) name: &'a str,
    pub(super) chw: (usize, usize, usize),
    pub(super) out_chw: (usize, usize, usize),
    pub(super) kernel: (usize, usize),
    pub(super) stride: usize,
    pub(super) padding: usize,
    pub(super) groups: usize,
    pub(super) act: Act,
    /// The generated weights: `w` as the im2col path stores them (per group, `[c/g·kh·kw][co/g]`),
    /// the per-channel `scale` and `shift` (either may be empty).
    pub(super) weights: &'a Weights,
}

/// `v` as a cuDNN dimension.
pub(super) fn dim(v: usize, what: &str, node: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::Internal(format!(
            "cuda device: {what} {v} of '{node}' exceeds cuDNN's int"
        ))
    })
}

/// The data a precision's convolutions hold.
pub(super) fn data_of(precision: Precision) -> Data {
    match precision {
        Precision::F32 | Precision::Tf32 => Data::F32,
        Precision::F16 => Data::F16,
    }
}

impl ConvPlan {
    /// The plan for one convolution at sub-batches of 1 to `max_batch` images, in `precision`,
    /// made by `path`'s engine.
    pub(super) fn new(
        dnn: &Dnn,
        stream: &Arc<CudaStream>,
        spec: &ConvSpec,
        max_batch: usize,
        (precision, path): (Precision, ConvPath),
    ) -> Result<ConvPlan> {
        let ConvSpec {
            chw: (c, h, w),
            out_chw: (co, ho, wo),
            kernel: (kh, kw),
            groups,
            act,
            weights,
            ..
        } = *spec;
        let data = data_of(precision);
        let (cg, cog) = (c / groups, co / groups);
        // the filter: KCRS with the scale multiplied in
        let kk = cg * kh * kw;
        let mut kcrs = vec![0.0f32; co * kk];
        for g in 0..groups {
            for j in 0..cog {
                let o = g * cog + j;
                let s = weights.scale.get(o).copied().unwrap_or(1.0);
                for r in 0..kk {
                    kcrs[o * kk + r] = weights.w[(g * kk + r) * cog + j] * s;
                }
            }
        }
        let weights_dev = match data {
            Data::F32 => Kcrs::F(stream.clone_htod(&kcrs).map_err(cuda_err)?),
            Data::F16 => {
                let h: Vec<half::f16> = kcrs.iter().map(|&x| half::f16::from_f32(x)).collect();
                Kcrs::H(stream.clone_htod(&h).map_err(cuda_err)?)
            }
        };
        let shift = if weights.shift.is_empty() {
            None
        } else {
            Some(stream.clone_htod(&weights.shift).map_err(cuda_err)?)
        };
        let legacy = || dnn_legacy::Legacy::new(dnn, stream, spec, max_batch, precision);
        let engine = match path {
            ConvPath::Cudnn => {
                let plans = (1..=max_batch)
                    .map(|n| dnn_graph::GraphPlan::new(dnn, spec, n, precision))
                    .collect::<Result<Option<Vec<_>>>>()?;
                match plans {
                    Some(p) => Engine::Graph(p),
                    None => Engine::Legacy(legacy()?),
                }
            }
            ConvPath::CudnnLegacy => Engine::Legacy(legacy()?),
            ConvPath::Im2col => {
                return Err(Error::Internal(
                    "cuda device: a cuDNN plan asked for on the im2col path".into(),
                ))
            }
        };
        Ok(ConvPlan {
            weights: weights_dev,
            shift,
            act: act_code(act),
            engine,
            chw: (c, h, w),
            out_chw: (co, ho, wo),
        })
    }

    /// The largest workspace any of its sub-batch sizes needs.
    pub(super) fn workspace(&self) -> usize {
        match &self.engine {
            Engine::Graph(plans) => plans.iter().map(|p| p.workspace).max().unwrap_or(0),
            Engine::Legacy(l) => l.workspace(),
        }
    }

    /// What runs `n` images (the engine or algorithm, for reports and tests).
    pub(super) fn algorithm(&self, n: usize) -> Option<String> {
        let i = n.checked_sub(1)?;
        match &self.engine {
            Engine::Graph(plans) => plans.get(i).map(|p| p.describe()),
            Engine::Legacy(l) => l.algorithm(i).map(|a| format!("legacy API {a}")),
        }
    }
}

/// What [`convolve`] reads and writes: `x` and `y` the sub-batch's `n` images (f32, as the
/// device stores them), `s16` the f16 scratch at f16 precision.
pub(super) struct ConvIo<'a, 'b> {
    pub(super) x: &'b CudaView<'a, f32>,
    pub(super) y: &'b mut CudaViewMut<'a, f32>,
    pub(super) n: usize,
    pub(super) s16: Option<&'b mut Scratch16>,
}

/// The device addresses one cuDNN call reads and writes.
pub(super) struct Ptrs {
    pub(super) x: u64,
    pub(super) w: u64,
    pub(super) y: u64,
    /// The workspace and its bytes.
    pub(super) ws: (u64, usize),
}

/// Runs `plan` on `io.n` images: the cuDNN call and, where it does not fuse them, the shift and
/// activation (see the module's paragraph).
pub(super) fn convolve(
    dnn: &mut Dnn,
    plan: &ConvPlan,
    stream: &Arc<CudaStream>,
    funcs: &HashMap<String, CudaFunction>,
    io: ConvIo,
) -> Result<()> {
    let ConvIo { x, y, n, s16 } = io;
    let Dnn {
        handle, workspace, ..
    } = dnn;
    let ws = workspace
        .as_mut()
        .ok_or_else(|| missing("cuDNN workspace"))?;
    let need = plan.workspace();
    if ws.len() < need {
        return Err(Error::Internal(format!(
            "cuda device: cuDNN workspace of {} bytes, the plan needs {need}",
            ws.len()
        )));
    }
    let (c, h, w) = plan.chw;
    let (co, ho, wo) = plan.out_chw;
    let (in_len, out_len) = (n * c * h * w, n * co * ho * wo);
    let (wsp, _gws) = ws.device_ptr_mut(stream);
    let fused = match (&plan.weights, s16) {
        (Kcrs::F(wt), _) => {
            let (xp, _gx) = x.device_ptr(stream);
            let (wp, _gw) = wt.device_ptr(stream);
            let (yp, _gy) = y.device_ptr_mut(stream);
            let ptrs = Ptrs {
                x: xp,
                w: wp,
                y: yp,
                ws: (wsp, need),
            };
            run(handle, plan, n, stream, ptrs)?
        }
        (Kcrs::H(wt), Some(s16)) => {
            gemm::to_f16(stream, funcs, x, &mut s16.a, in_len)?;
            {
                let (xp, _gx) = s16.a.device_ptr(stream);
                let (wp, _gw) = wt.device_ptr(stream);
                let (yp, _gy) = s16.c.device_ptr_mut(stream);
                let ptrs = Ptrs {
                    x: xp,
                    w: wp,
                    y: yp,
                    ws: (wsp, need),
                };
                run(handle, plan, n, stream, ptrs)?;
            }
            let f = funcs
                .get("channel_epilogue_h")
                .ok_or_else(|| missing("channel_epilogue_h"))?;
            let null = 0u64;
            let (co_i, p_i, act_i, n_i) = (co as i32, (ho * wo) as i32, plan.act, n as i32);
            let y16 = s16.c.slice(..out_len);
            let mut b = stream.launch_builder(f);
            b.arg(&y16).arg(&mut *y);
            match &plan.shift {
                Some(s) => b.arg(s),
                None => b.arg(&null),
            };
            b.arg(&co_i).arg(&p_i).arg(&act_i).arg(&n_i);
            // SAFETY: n·co·p halves in, as many floats out.
            unsafe { b.launch(elems(out_len)) }.map_err(cuda_err)?;
            return Ok(());
        }
        (Kcrs::H(_), None) => return Err(missing("f16 scratch")),
    };
    if !fused && (plan.shift.is_some() || plan.act != 0) {
        conv::channel_epilogue(
            stream,
            funcs,
            y,
            (None, plan.shift.as_ref()),
            (co, ho * wo, n),
            plan.act,
        )?;
    }
    Ok(())
}

/// The engine's cuDNN call for `n` images at `ptrs`; whether it applied the shift and
/// activation too.
fn run(
    handle: &Handle,
    plan: &ConvPlan,
    n: usize,
    stream: &Arc<CudaStream>,
    ptrs: Ptrs,
) -> Result<bool> {
    let i = n.wrapping_sub(1);
    match &plan.engine {
        Engine::Graph(plans) => {
            let p = plans
                .get(i)
                .ok_or_else(|| missing("cuDNN plan for this sub-batch size"))?;
            p.execute(handle, &ptrs)?;
            Ok(false)
        }
        Engine::Legacy(l) => l.run(handle, i, stream, &ptrs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_choices_parse_and_name_the_allowed_values() {
        assert_eq!(ConvChoice::parse("auto").unwrap(), ConvChoice::Auto);
        for p in [ConvPath::Cudnn, ConvPath::CudnnLegacy, ConvPath::Im2col] {
            assert_eq!(ConvChoice::parse(p.name()).unwrap(), ConvChoice::Path(p));
        }
        let e = ConvChoice::parse("winograd").unwrap_err().to_string();
        assert!(
            e.contains("--conv") && e.contains("auto, cudnn, cudnn-legacy, im2col"),
            "{e}"
        );
    }
}
