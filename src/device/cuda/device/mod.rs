//! The CUDA device: the CPU device's layout ([`Layout`]) and weights on the GPU. Every node's
//! output buffer, LSTM cell states, K|V caches and scratch are allocated at
//! [`Device::prepare`] for the maximum batch; serving only launches kernels and copies into those
//! buffers. A node's input rows are assembled by one `copy_segments` launch per source buffer
//! (the gather that preemption and merging need), computed in scratch, and scattered back to the
//! members' slots — except where the staged segments show the sub-batch's input rows to be one
//! contiguous run of one producer's buffer (batch 1, or members in consecutive slots): then the
//! op reads them in place (an add each of its two inputs); and where its output rows are one
//! contiguous run of its own buffer, it computes straight into them (`Operands`).
//! Convolutions run in cuDNN where it loads (`dnn`; else, or with `--conv im2col`, as im2col and
//! a cuBLAS GEMM), linear layers in cuBLASLt with their bias and activation fused (`blaslt`),
//! the other GEMMs in cuBLAS (row-major via the transposed column-major call), everything else
//! in the NVRTC-compiled kernels of `kernels/`. Node time: the host's, from entering `execute`
//! to the end of the node's one blocking sync (launch cost included). One file per op family —
//! `conv`, `linear`, `recurrent`, `attention`, `rows` — as in the CPU device; `gemm` holds the
//! cuBLAS calls they share, `dnn` and `blaslt` the cuDNN and cuBLASLt plans, `buffers` the
//! allocation at prepare and `movement` the gather, scatter and capture, `graphs` the CUDA
//! graphs of `--cuda-graphs`.

/// Declares a guard owning one raw cuDNN or cuBLASLt object, destroyed on drop.
macro_rules! guard {
    ($vis:vis $name:ident, $raw:ty, $destroy:path) => {
        $vis struct $name($vis $raw);
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: created by the matching create call and destroyed once, here; an
                // error on destruction has nothing left to report to.
                let _ = unsafe { $destroy(self.0) };
            }
        }
        // SAFETY: these library objects are not internally synchronized but may be used from
        // any thread one call at a time: they are only reached through the owning device's
        // `&mut self` (as the CUDA graphs in graphs.rs).
        unsafe impl Send for $name {}
    };
}

mod attention;
mod blaslt;
mod buffers;
mod conv;
mod dnn;
mod dnn_graph;
mod dnn_legacy;
mod gemm;
mod graphs;
mod linear;
mod movement;
mod recurrent;
mod rows;
mod state;

pub use dnn::{ConvChoice, ConvPath};

use super::nvrtc;
use crate::device::capture::{Capture, CaptureMode};
use crate::device::layout::{Layout, Seg, Src};
use crate::device::weights::{self, Weights};
use crate::device::{Device, Member, Timing};
use crate::error::{Error, Result};
use crate::graph::op::{Act, AttnMode, Op, PoolKind, PosEnc};
use crate::graph::{Class, Model, NodeStep};
use crate::time::Nanos;
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr,
    LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use gemm::Units;
pub use graphs::GraphStats;
use graphs::Graphs;
use state::{blas_workspace, Host, Libs, Memory, Pinned};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

fn cuda_err(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::DeviceFailed {
        device: "cuda".into(),
        source: Box::new(e),
    }
}

fn act_code(a: Act) -> i32 {
    match a {
        Act::None => 0,
        Act::Relu => 1,
        Act::Relu6 => 2,
        Act::Gelu => 3,
        Act::GeluErf => 6,
        Act::Tanh => 4,
        Act::Sigmoid => 5,
    }
}

/// A launch over `n` elements. `n` never exceeds a buffer's size, which `prepare` bounds by
/// `i32::MAX` (buffers::fits_one_launch), so it fits the 32-bit count.
fn elems(n: usize) -> LaunchConfig {
    LaunchConfig::for_num_elems(n.clamp(1, i32::MAX as usize) as u32)
}

/// A launch of `n` blocks (bounded like [`elems`]).
fn blocks(n: usize, threads: u32, shared: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.clamp(1, i32::MAX as usize) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: shared,
    }
}

fn missing(what: &str) -> Error {
    Error::Internal(format!("cuda device: {what} missing (not prepared?)"))
}

/// Whether op `op` works on [`Operands`]: it can read its whole input in place from one
/// producer's rows and compute straight into its own output rows (conv.rs, linear.rs, rows.rs;
/// a row copy reads the producer in its scatter and gathers into its output rows). Not an
/// activation (in place over its input), LSTM or attention (their own staging).
fn in_place(op: &Op) -> bool {
    matches!(
        op,
        Op::Conv2d { .. }
            | Op::Pool { .. }
            | Op::Linear { .. }
            | Op::Embedding { .. }
            | Op::Add { .. }
            | Op::BatchNorm
            | Op::LayerNorm { .. }
            | Op::Softmax
            | Op::Argmax
            | Op::Flatten
            | Op::Concat
            | Op::Take { .. }
    )
}

/// Storage and arithmetic precision of the GEMMs and convolutions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 everywhere (no TF32: cuBLAS and cuBLASLt compute in f32, cuDNN with FMA math).
    F32,
    /// GEMM and convolution weights stored as f16; activations converted to f16 for each of
    /// them; f32 accumulation, results back in f32.
    F16,
    /// f32 storage, the GEMMs and convolutions on tensor cores in TF32 (a 10-bit mantissa),
    /// only when asked for.
    Tf32,
}

impl Precision {
    /// Parses `f32` / `f16` / `tf32`.
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            "tf32" => Ok(Precision::Tf32),
            o => Err(Error::invalid(
                "--precision",
                format!("unknown precision '{o}' (f32, f16, tf32)"),
            )),
        }
    }

    /// The name `--precision` takes for it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Tf32 => "tf32",
        }
    }
}

/// A GEMM operand in either storage.
enum Operand<'a> {
    F(cudarc::driver::CudaView<'a, f32>),
    H(cudarc::driver::CudaView<'a, half::f16>),
}

/// f16 scratch for the f16 GEMM path.
struct Scratch16 {
    a: CudaSlice<half::f16>,
    b: CudaSlice<half::f16>,
    c: CudaSlice<half::f16>,
}

struct GpuWeights {
    w: Option<CudaSlice<f32>>,
    /// The GEMM weights in f16 (f16 precision only).
    w16: Option<CudaSlice<half::f16>>,
    bias: Option<CudaSlice<f32>>,
    scale: Option<CudaSlice<f32>>,
    shift: Option<CudaSlice<f32>>,
    extra: Option<CudaSlice<f32>>,
}

struct NodeGpu {
    out: CudaSlice<f32>,
    w: GpuWeights,
    /// A convolution's cuDNN plan (with its own weights) on the cuDNN path.
    conv: Option<dnn::ConvPlan>,
    /// LSTM cell state (`max_batch × H`) or decoder self-attention K|V cache.
    state: Option<CudaSlice<f32>>,
    in_feat: usize,
    tied: Option<usize>,
}

/// A GEMM repeated `count` times with its operands `a`, `b` and `c` elements apart (a
/// strided-batched GEMM; stride 0 repeats an operand, as a convolution's weights).
#[derive(Clone, Copy, Debug)]
struct Strides {
    count: usize,
    a: usize,
    b: usize,
    c: usize,
}

impl Strides {
    /// One GEMM.
    const ONE: Strides = Strides {
        count: 1,
        a: 0,
        b: 0,
        c: 0,
    };

    /// cuBLAS's configuration for a row-major GEMM built by [`row_major`], which swaps the
    /// operands (cuBLAS's A is our B).
    fn config<T>(self, gemm: GemmConfig<T>) -> StridedBatchedConfig<T> {
        StridedBatchedConfig {
            gemm,
            batch_size: self.count as i32,
            stride_a: self.b as i64,
            stride_b: self.a as i64,
            stride_c: self.c as i64,
        }
    }
}

/// Preallocated device scratch.
struct Scratch {
    a: CudaSlice<f32>,
    c: CudaSlice<f32>,
    cols: CudaSlice<f32>,
    /// Attention scores of the grouped-GEMM path (one `L × L` block per member and head).
    scores: CudaSlice<f32>,
    /// A node's index tables (segment tables, i64 and i32 index arrays), packed at the offsets
    /// [`Staged`] gives them and uploaded in one copy.
    tables: CudaSlice<i64>,
}

/// `len` i32 that [`CudaDevice::stage_i32`] packed into `tables` from `at`.
fn i32s(
    tables: &CudaSlice<i64>,
    at: usize,
    len: usize,
) -> Result<cudarc::driver::CudaView<'_, i32>> {
    // SAFETY: any bits are a valid i32; `transmute` checks that `len` i32 fit.
    unsafe { tables.slice(at..).transmute::<i32>(len) }.ok_or_else(|| missing("i32 table"))
}

/// A `copy_segments` launch staged for a node: its source (a node's buffer, or a fill; none
/// for scatters and cache appends, whose source the caller names), where its segment table
/// starts in the node's tables, its segment count and its longest segment.
#[derive(Clone, Copy, Debug)]
struct SegCopy {
    src: Src,
    at: usize,
    nseg: usize,
    max_len: usize,
}

/// A node's index tables, built on the host before its first launch and uploaded in one copy.
#[derive(Default)]
struct Staged {
    /// Every table, one after another (i32 arrays packed two to an i64).
    host: Vec<i64>,
    /// The gather's launches (one per source buffer) and its row count.
    gathers: Vec<SegCopy>,
    rows: usize,
    /// The scatter back to the node's output rows.
    scatter: Option<SegCopy>,
    /// The decoder self-attention's append of this step's keys and values to its cache.
    cache: Option<SegCopy>,
    /// Where the op's own index arrays start: two i64 arrays and two i32 arrays.
    i64a: usize,
    i64b: usize,
    i32a: usize,
    i32b: usize,
    /// Attention: its shape and the most keys a query row has (the row kernel).
    attn: Option<(AttnShape, u32)>,
    /// Encoder self-attention as grouped GEMMs (`attention.rs`): one group per distinct
    /// sequence length; empty when the row kernel runs it.
    attn_gemm: Vec<attention::GemmGroup>,
    /// Per input of the node, when its rows for the whole sub-batch are one contiguous run of
    /// one producer's buffer (not the node's own), in the order the op reads them: the
    /// producer and the run's offset (see [`CudaDevice::stage_gather`]).
    runs: Vec<Option<(usize, usize)>>,
    /// The op reads its input in place, staging no gather: `Whole` the producer's run (all
    /// inputs as scratch A would hold them), `Pair` each of its two inputs' runs.
    direct_in: Option<DirectIn>,
    /// The op computes straight into its output rows, one contiguous run from this offset of
    /// its own buffer, staging no scatter.
    direct_out: Option<usize>,
    /// A row copy (flatten, concat, take) writing its output in place: the gather copies
    /// straight into node `.0`'s rows from offset `.1`, and nothing follows.
    gather_into: Option<(usize, usize)>,
}

/// How an op reads its input in place (see [`Staged::direct_in`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DirectIn {
    Whole(usize, usize),
    Pair([(usize, usize); 2]),
}

impl Staged {
    fn clear(&mut self) {
        let mut host = std::mem::take(&mut self.host);
        let mut gathers = std::mem::take(&mut self.gathers);
        let mut runs = std::mem::take(&mut self.runs);
        let mut attn_gemm = std::mem::take(&mut self.attn_gemm);
        host.clear();
        gathers.clear();
        runs.clear();
        attn_gemm.clear();
        *self = Staged {
            host,
            gathers,
            runs,
            attn_gemm,
            ..Staged::default()
        };
    }
}

/// Query row stride, (keys node, values node) or None for the K|V cache, key and value row
/// strides, head widths of keys and values, and whether the scores are additive.
#[derive(Clone, Copy, Debug)]
struct AttnShape {
    qstride: usize,
    kv_node: Option<(usize, usize)>,
    kstride: usize,
    vstride: usize,
    dh: usize,
    dv: usize,
    additive: bool,
    /// A decoder-only model's decode step: the prompt's keys and values (`kv_node`, packed
    /// Q|K|V rows `kstride` apart), then the cache's (`vstride` apart); two counts a row.
    prefix: bool,
}

/// Which scratch buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Buf {
    A,
    C,
}

/// Every node's buffers but one's (the node being run, whose output is borrowed mutably).
struct Others<'a> {
    lo: &'a [NodeGpu],
    hi: &'a [NodeGpu],
}

impl<'a> Others<'a> {
    /// Node `j` (not the one split off).
    fn get(&self, j: usize) -> Result<&'a NodeGpu> {
        let n = self.lo.len();
        match j.cmp(&n) {
            std::cmp::Ordering::Less => Ok(&self.lo[j]),
            std::cmp::Ordering::Greater => Ok(&self.hi[j - n - 1]),
            std::cmp::Ordering::Equal => Err(Error::Internal(
                "cuda device: a node reads its own output in place".into(),
            )),
        }
    }
}

/// What an op computing node `i` for the sub-batch reads and writes: its input rows `x` (scratch
/// A, or the producer's rows in place), the second input `x2` of an add reading both in place,
/// where its output rows go (`y`: scratch C, or its own output rows in place), the rest of the
/// scratch (im2col columns, the index tables), its weights (and cuDNN plan) and the other nodes'
/// buffers (tied tables).
struct Operands<'a> {
    x: CudaView<'a, f32>,
    x2: Option<CudaView<'a, f32>>,
    y: CudaViewMut<'a, f32>,
    cols: &'a mut CudaSlice<f32>,
    tables: &'a CudaSlice<i64>,
    w: &'a GpuWeights,
    conv: Option<&'a dnn::ConvPlan>,
    others: Others<'a>,
}

impl CudaDevice {
    /// Node `i`'s [`Operands`] for `in_len` input and `out_len` output elements, as staged.
    fn operands<'a>(
        nodes: &'a mut [NodeGpu],
        sc: &'a mut Scratch,
        staged: &Staged,
        i: usize,
        in_len: usize,
        out_len: usize,
    ) -> Result<Operands<'a>> {
        let (lo, rest) = nodes.split_at_mut(i);
        let (me, hi) = rest
            .split_first_mut()
            .ok_or_else(|| missing("node buffer"))?;
        let others = Others { lo, hi };
        let Scratch {
            a, c, cols, tables, ..
        } = sc;
        let run = |(p, off): (usize, usize), len: usize| -> Result<CudaView<'a, f32>> {
            Ok(others.get(p)?.out.slice(off..off + len))
        };
        let (x, x2) = match staged.direct_in {
            None => (a.slice(..in_len), None),
            Some(DirectIn::Whole(p, off)) => (run((p, off), in_len)?, None),
            Some(DirectIn::Pair([r0, r1])) => (run(r0, in_len / 2)?, Some(run(r1, in_len / 2)?)),
        };
        let y = match staged.direct_out {
            None => c.slice_mut(..out_len),
            Some(off) => me.out.slice_mut(off..off + out_len),
        };
        Ok(Operands {
            x,
            x2,
            y,
            cols,
            tables,
            w: &me.w,
            conv: me.conv.as_ref(),
            others,
        })
    }
}

/// The CUDA device: its state by concern, so that an op borrows the part it reads (the
/// library handles, the prepared model's device memory, the host's staging of rows) apart
/// from the part it writes.
pub struct CudaDevice {
    seed: u64,
    name: String,
    precision: Precision,
    /// Library handles and compiled kernels, fixed once the device is open.
    lib: Libs,
    /// Device memory for the prepared model.
    mem: Memory,
    /// The host side of each execution: its rows, staged, reused.
    host: Host,
    /// Outputs captured for a comparison, or handed to a front end's exchange.
    capture: Capture,
    /// CUDA graphs of repeated node executions.
    graphs: Graphs,
}

impl CudaDevice {
    /// Opens device `ordinal` (after [`super::require`]) and compiles the kernels for its
    /// architecture.
    pub fn new(ordinal: usize, seed: u64, precision: Precision) -> Result<Self> {
        let probe = super::require()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::DeviceUnavailable {
            device: "cuda".into(),
            msg: format!("cannot open device {ordinal}: {e:?}"),
        })?;
        let (major, minor) = ctx.compute_capability().map_err(cuda_err)?;
        let arch = nvrtc::parse_arch(&format!("sm_{major}{minor}")).ok();
        // SAFETY: the device enqueues everything on its one stream, so cudarc's cross-stream
        // events (a wait and a record per operand of every launch) would order nothing; they
        // are off before the first allocation, as cudarc requires.
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own: the legacy default stream cannot be captured into a CUDA graph
        // (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, seen on an H100).
        let stream = ctx.new_stream().map_err(cuda_err)?;
        let blas = CudaBlas::new(stream.clone()).map_err(cuda_err)?;
        let blas_workspace = blas_workspace(&blas, &stream, major)?;
        if precision == Precision::Tf32 {
            // SAFETY: a live handle; the math mode only widens which kernels cuBLAS may use.
            unsafe {
                cudarc::cublas::sys::cublasSetMathMode(
                    *blas.handle(),
                    cudarc::cublas::sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
                )
            }
            .result()
            .map_err(cuda_err)?;
        }
        let lt = blaslt::Lt::new(&stream, major, precision)?;
        // cudarc panics on a call into a library that is not there: cuDNN only when it loads
        let (dnn, conv_path, conv_note) = if !probe.cudnn {
            let why = format!("cuDNN not found ({})", super::CUDNN_HINT);
            (None, ConvPath::Im2col, Some(why))
        } else {
            match dnn::Dnn::new(&stream) {
                Ok(d) => (Some(d), ConvPath::Cudnn, None),
                Err(e) => {
                    let why = format!("cuDNN loads but does not start ({e})");
                    (None, ConvPath::Im2col, Some(why))
                }
            }
        };
        let mut funcs = HashMap::new();
        for c in nvrtc::compile_all_cached(arch)?.iter() {
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(c.ptx.clone()))
                .map_err(cuda_err)?;
            for k in &c.kernels {
                funcs.insert(k.clone(), module.load_function(k).map_err(cuda_err)?);
            }
        }
        let name = ctx.name().map_err(cuda_err)?;
        Ok(CudaDevice {
            seed,
            name,
            precision,
            lib: Libs {
                ctx,
                stream,
                blas,
                _blas_workspace: blas_workspace,
                lt,
                dnn,
                conv_path,
                conv_note,
                funcs,
            },
            mem: Memory {
                layout: None,
                model_name: String::new(),
                nodes: Vec::new(),
                scratch: None,
                s16: None,
                max_dec: 1,
                input_len: 0,
            },
            host: Host {
                segs: Vec::new(),
                staged: Staged::default(),
                host_i32: Vec::new(),
                host_i64: Vec::new(),
                host_i64b: Vec::new(),
                pinned: None,
            },
            capture: Capture::default(),
            graphs: Graphs::default(),
        })
    }

    /// The GPU's name.
    pub fn gpu_name(&self) -> &str {
        &self.name
    }

    /// Sets how convolutions run (`--conv`; call before [`Device::prepare`]): `auto` keeps
    /// what [`CudaDevice::new`] chose (cuDNN where it loads); `cudnn` without cuDNN is an error
    /// that says what to install.
    pub fn with_conv(mut self, choice: ConvChoice) -> Result<Self> {
        match choice {
            ConvChoice::Auto => {}
            ConvChoice::Path(ConvPath::Im2col) => {
                self.lib.dnn = None;
                self.lib.conv_path = ConvPath::Im2col;
                self.lib.conv_note = None;
            }
            ConvChoice::Path(p @ (ConvPath::Cudnn | ConvPath::CudnnLegacy)) => {
                if self.lib.dnn.is_none() {
                    return Err(Error::invalid(
                        "--conv",
                        format!(
                            "{} needs the cuDNN library: {}",
                            p.name(),
                            self.lib.conv_note.as_deref().unwrap_or("cuDNN not loaded")
                        ),
                    ));
                }
                self.lib.conv_path = p;
            }
        }
        Ok(self)
    }

    /// How convolutions run.
    pub fn conv_path(&self) -> ConvPath {
        self.lib.conv_path
    }

    /// Why convolutions run as im2col although `--conv` was `auto` (cuDNN missing), if so.
    pub fn conv_note(&self) -> Option<&str> {
        self.lib.conv_note.as_deref()
    }

    /// The cuDNN algorithm chosen for node `node` at `n` images (cuDNN path, after prepare).
    pub fn conv_algorithm(&self, node: usize, n: usize) -> Option<String> {
        self.mem.nodes.get(node)?.conv.as_ref()?.algorithm(n)
    }

    /// cuBLASLt plans made so far (one per linear node, row count and operand alignment).
    pub fn linear_plans(&self) -> usize {
        self.lib.lt.plans()
    }

    /// Stages node `i`'s index tables for the sub-batch (see [`Staged`]) and uploads them in
    /// one copy, before any of its launches.
    fn stage(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<()> {
        let i = at.node.idx();
        self.host.staged.clear();
        if in_place(&model.nodes[i].op) {
            self.stage_direct_out(model, i, members)?;
        }
        match &model.nodes[i].op {
            Op::Input { .. } => return Ok(()),
            Op::Lstm { .. } => self.stage_lstm(model, i, members)?,
            Op::Attention { mode, heads } => {
                self.stage_attention(model, i, members, *mode, *heads)?
            }
            Op::Embedding { .. } => self.stage_embedding(model, i, members)?,
            Op::Conv2d { .. }
            | Op::Pool { .. }
            | Op::Flatten
            | Op::Linear { .. }
            | Op::Add { .. }
            | Op::Concat
            | Op::Activation { .. }
            | Op::BatchNorm
            | Op::LayerNorm { .. }
            | Op::Softmax
            | Op::Argmax
            | Op::Take { .. } => self.stage_gather(model, i, members)?,
        }
        if self.host.staged.direct_out.is_none() {
            self.stage_scatter(model, i, members)?;
        }
        self.upload_tables()
    }

    /// Runs node `i` for the sub-batch: one method per op family (conv.rs, linear.rs,
    /// recurrent.rs, attention.rs, rows.rs), as in the CPU device.
    fn run_node(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<()> {
        let i = at.node.idx();
        match &model.nodes[i].op {
            Op::Input { .. } => self.input(model, i, members),
            Op::Conv2d { .. } => self.conv(model, i),
            Op::Pool { .. } => self.pool(model, i),
            Op::Linear { .. } => self.linear(model, i),
            Op::Lstm { .. } => self.lstm(model, i, members),
            Op::Attention { mode, heads } => self.attention(i, *mode, *heads),
            Op::Embedding { .. } => self.embedding(model, i),
            // every other op, named: a new op is a compile error here
            Op::Flatten
            | Op::Add { .. }
            | Op::Concat
            | Op::Activation { .. }
            | Op::BatchNorm
            | Op::LayerNorm { .. }
            | Op::Softmax
            | Op::Argmax
            | Op::Take { .. } => self.rowwise(model, i),
        }
    }
}

impl Device for CudaDevice {
    /// Starts (or stops) capturing final outputs per request, to compare with the CPU device.
    fn set_capture(&mut self, mode: CaptureMode) {
        self.capture = self.capture.recording(mode);
    }

    /// Takes the captured outputs.
    fn take_captured(&mut self) -> Capture {
        self.capture.take()
    }

    /// Serves a front end: inputs from `x` where it holds them, each request's final outputs
    /// (captured as for the CPU comparison) handed to `x` when it completes.
    fn set_exchange(&mut self, x: Option<std::sync::Arc<crate::device::exchange::Exchange>>) {
        self.capture = Capture::exchanging(x);
        self.stage_for_exchange();
    }

    fn complete(&mut self, m: &Member) {
        self.capture.hand_over(m.input);
    }

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn notice(&self) -> Option<String> {
        let why = self.lib.conv_note.as_deref()?;
        Some(format!("{why}: convolutions run as im2col + cuBLAS"))
    }

    fn description(&self) -> String {
        let conv = match (self.lib.conv_path, &self.lib.dnn) {
            (ConvPath::Cudnn, Some(d)) => format!("cuDNN {} convolutions", d.version_string()),
            (ConvPath::CudnnLegacy, Some(d)) => {
                format!("cuDNN {} legacy-API convolutions", d.version_string())
            }
            (ConvPath::Cudnn | ConvPath::CudnnLegacy, None) | (ConvPath::Im2col, _) => {
                "im2col convolutions".to_string()
            }
        };
        format!("cuda ({}; {}, {conv})", self.name, self.precision.name())
    }

    fn is_virtual(&self) -> bool {
        false
    }

    fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()> {
        if max_batch == 0 {
            return Err(Error::invalid("max batch", "must be at least 1"));
        }
        self.allocate(model, max_batch as usize)?;
        self.stage_for_exchange();
        self.lib.stream.synchronize().map_err(cuda_err)?;
        Ok(())
    }

    fn execute(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
        // The node's time is the host's, from here until its work is done: building and
        // uploading its index tables, every launch and enqueue, and the GPU's work. One
        // blocking sync per node, at its end; nothing inside the node waits.
        let t0 = Instant::now();
        if model.name != self.mem.model_name {
            return Err(Error::Internal(format!(
                "cuda device prepared for {}, asked to run {}",
                self.mem.model_name, model.name
            )));
        }
        let mb = self.mem.layout.as_ref().map_or(0, |l| l.max_batch);
        if members.is_empty() || members.len() > mb || members.iter().any(|m| m.slot as usize >= mb)
        {
            return Err(Error::Internal(
                "sub-batch does not fit the prepared slots".into(),
            ));
        }
        if at.step as usize
            >= self
                .mem
                .max_dec
                .max(model.seq.as_ref().map_or(1, |s| s.max_enc as usize))
        {
            return Err(Error::Internal(
                "step beyond the model's maximum length".into(),
            ));
        }
        self.stage(model, at, members)?;
        self.run_staged(model, at, members)?;
        self.lib.stream.synchronize().map_err(cuda_err)?;
        let time = Nanos(t0.elapsed().as_nanos() as u64);
        if self.capture.is_on() {
            self.capture_outputs(model, at.node.idx(), members)?;
        }
        Ok(Timing {
            time,
            ..Timing::default()
        })
    }
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaDevice({}, model {})",
            self.name, self.mem.model_name
        )
    }
}
