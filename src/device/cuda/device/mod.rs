//! The CUDA device: the CPU device's layout ([`Layout`]) and weights on the GPU. Every node's
//! output buffer, LSTM cell states, K|V caches and scratch are allocated at
//! [`Device::prepare`] for the maximum batch; serving only launches kernels and copies into those
//! buffers. A node's input rows are assembled by one `copy_segments` launch per source buffer
//! (the gather that preemption and merging need), computed in scratch, and scattered back to the
//! members' slots. GEMMs run in cuBLAS (row-major via the transposed column-major call),
//! everything else in the NVRTC-compiled kernels of `kernels/`. Node time: CUDA events. One
//! file per op family — `conv`, `linear`, `recurrent`, `attention`, `rows` — as in the CPU
//! device; `gemm` holds the cuBLAS calls they share.

mod attention;
mod conv;
mod gemm;
mod linear;
mod recurrent;
mod rows;

use super::nvrtc;
use crate::device::capture::{Capture, CaptureMode};
use crate::device::cpu::weights::{self, Weights};
use crate::device::layout::{Layout, Seg, Src};
use crate::device::{Device, Member, Timing};
use crate::error::{Error, Result};
use crate::graph::op::{Act, AttnMode, Op, PoolKind, PosEnc};
use crate::graph::{Class, Model, NodeStep};
use crate::time::Nanos;
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use std::collections::HashMap;
use std::sync::Arc;

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
        Act::Tanh => 4,
        Act::Sigmoid => 5,
    }
}

fn elems(n: usize) -> LaunchConfig {
    LaunchConfig::for_num_elems(n.max(1) as u32)
}

fn blocks(n: usize, threads: u32, shared: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: shared,
    }
}

fn missing(what: &str) -> Error {
    Error::Internal(format!("cuda device: {what} missing (not prepared?)"))
}

/// Storage precision of the GEMM operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 everywhere.
    F32,
    /// GEMM weights stored as f16; activations converted to f16 for each GEMM; cuBLAS
    /// accumulates in f32 (CUBLAS_COMPUTE_32F) and the result returns to f32.
    F16,
}

impl Precision {
    /// Parses `f32` / `f16`.
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            o => Err(Error::invalid(
                "--precision",
                format!("unknown precision '{o}' (f32, f16)"),
            )),
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
    seg: CudaSlice<i64>,
    i32a: CudaSlice<i32>,
    i64a: CudaSlice<i64>,
    i64b: CudaSlice<i64>,
}

/// Query row stride, (keys node, values node) or None for the K|V cache, key and value row
/// strides, head widths of keys and values, and whether the scores are additive.
type AttnShape = (
    usize,
    Option<(usize, usize)>,
    usize,
    usize,
    usize,
    usize,
    bool,
);

/// Which scratch buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Buf {
    A,
    C,
}

/// The CUDA device.
pub struct CudaDevice {
    seed: u64,
    /// Held so the context outlives every buffer (the stream holds it too).
    _ctx: Arc<CudaContext>,
    /// Start and end events of a node execution, created once and re-recorded.
    events: (CudaEvent, CudaEvent),
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    funcs: HashMap<String, CudaFunction>,
    name: String,
    layout: Option<Layout>,
    model_name: String,
    nodes: Vec<NodeGpu>,
    scratch: Option<Scratch>,
    s16: Option<Scratch16>,
    precision: Precision,
    max_dec: usize,
    // host-side scratch, reused
    segs: Vec<Seg>,
    seg_host: Vec<i64>,
    host_i32: Vec<i32>,
    host_i64: Vec<i64>,
    host_i64b: Vec<i64>,
    host_in: Vec<f32>,
    capture: Capture,
}

impl CudaDevice {
    /// Opens device `ordinal` (after [`super::require`]) and compiles the kernels for its
    /// architecture.
    pub fn new(ordinal: usize, seed: u64, precision: Precision) -> Result<Self> {
        super::require()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::DeviceUnavailable {
            device: "cuda".into(),
            msg: format!("cannot open device {ordinal}: {e:?}"),
        })?;
        let (major, minor) = ctx.compute_capability().map_err(cuda_err)?;
        let arch = nvrtc::parse_arch(&format!("sm_{major}{minor}")).ok();
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone()).map_err(cuda_err)?;
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
        let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
        let events = (event().map_err(cuda_err)?, event().map_err(cuda_err)?);
        Ok(CudaDevice {
            events,
            seed,
            _ctx: ctx,
            stream,
            blas,
            funcs,
            name,
            layout: None,
            model_name: String::new(),
            nodes: Vec::new(),
            scratch: None,
            s16: None,
            precision,
            max_dec: 1,
            segs: Vec::new(),
            seg_host: Vec::new(),
            host_i32: Vec::new(),
            host_i64: Vec::new(),
            host_i64b: Vec::new(),
            host_in: Vec::new(),
            capture: Capture::default(),
        })
    }

    /// The GPU's name.
    pub fn gpu_name(&self) -> &str {
        &self.name
    }

    fn upload(&self, v: &[f32]) -> Result<Option<CudaSlice<f32>>> {
        if v.is_empty() {
            Ok(None)
        } else {
            Ok(Some(self.stream.clone_htod(v).map_err(cuda_err)?))
        }
    }

    fn upload_weights(&self, w: &Weights, gemm: bool) -> Result<GpuWeights> {
        let w16 = if gemm && self.precision == Precision::F16 && !w.w.is_empty() {
            let h: Vec<half::f16> = w.w.iter().map(|&x| half::f16::from_f32(x)).collect();
            Some(self.stream.clone_htod(&h).map_err(cuda_err)?)
        } else {
            None
        };
        Ok(GpuWeights {
            w: self.upload(&w.w)?,
            w16,
            bias: self.upload(&w.bias)?,
            scale: self.upload(&w.scale)?,
            shift: self.upload(&w.shift)?,
            extra: self.upload(&w.extra)?,
        })
    }

    /// Runs the copies in `self.segs` into scratch `dst`: one launch per source buffer (node
    /// buffers, or fills).
    fn copy_segs(&mut self, dst: Buf) -> Result<()> {
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            segs,
            seg_host,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let f = funcs
            .get("copy_segments")
            .ok_or_else(|| missing("copy_segments"))?;
        let mut done = vec![false; segs.len()];
        for s0 in 0..segs.len() {
            if done[s0] {
                continue;
            }
            let key = segs[s0].src;
            seg_host.clear();
            let mut fill = 0.0f32;
            for (j, s) in segs.iter().enumerate() {
                let same = match (key, s.src) {
                    (Src::Node { node: a, .. }, Src::Node { node: b, off }) if a == b => {
                        seg_host.extend_from_slice(&[off as i64, s.dst as i64, s.len as i64]);
                        true
                    }
                    (Src::Fill(a), Src::Fill(b)) if a == b => {
                        fill = b;
                        seg_host.extend_from_slice(&[-1, s.dst as i64, s.len as i64]);
                        true
                    }
                    _ => false,
                };
                if same {
                    done[j] = true;
                }
            }
            let n = seg_host.len();
            stream
                .memcpy_htod(&seg_host[..], &mut sc.seg.slice_mut(..n))
                .map_err(cuda_err)?;
            let nseg = (n / 3) as i32;
            let src: &CudaSlice<f32> = match key {
                Src::Node { node, .. } => &nodes[node].out,
                Src::Fill(_) => &nodes[0].out, // unread: every segment is a fill
            };
            let mut b = stream.launch_builder(f);
            match dst {
                Buf::A => b.arg(src).arg(&mut sc.a),
                Buf::C => b.arg(src).arg(&mut sc.c),
            };
            b.arg(&sc.seg).arg(&nseg).arg(&fill);
            // SAFETY: every segment lies inside its source buffer and inside the scratch (sized
            // at prepare for the largest gather).
            unsafe { b.launch(blocks(nseg as usize, 256, 0)) }.map_err(cuda_err)?;
        }
        segs.clear();
        Ok(())
    }

    /// Gathers node `i`'s concatenated input rows for `members` into scratch A; returns the row
    /// count.
    fn gather(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<usize> {
        let node = &model.nodes[i];
        let width = self.nodes[i].in_feat;
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let mut rows = 0;
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                let mut off = rows * width;
                for (k, inp) in node.inputs.iter().enumerate() {
                    layout.input_segs(model, node, inp, m.slot, m.len, step, r, off, |s| {
                        self.segs.push(s)
                    });
                    off += node.in_shapes[k].feat.iter().product::<usize>();
                }
                rows += 1;
            }
        }
        self.copy_segs(Buf::A)?;
        Ok(rows)
    }

    /// Scatters `width`-wide rows of scratch `from` to the members' output rows of node `i`.
    fn scatter(&mut self, model: &Model, i: usize, members: &[Member], from: Buf) -> Result<()> {
        let node = &model.nodes[i];
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            seg_host,
            layout,
            ..
        } = self;
        let layout = layout.as_ref().ok_or_else(|| missing("layout"))?;
        let feat = layout.nodes[i].feat;
        seg_host.clear();
        let mut r_at = 0;
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                let pos = layout.out_pos(model, i, step, r, m.len);
                seg_host.extend_from_slice(&[
                    (r_at * feat) as i64,
                    layout.offset(i, m.slot, pos) as i64,
                    feat as i64,
                ]);
                r_at += 1;
            }
        }
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let n = seg_host.len();
        stream
            .memcpy_htod(&seg_host[..], &mut sc.seg.slice_mut(..n))
            .map_err(cuda_err)?;
        let nseg = (n / 3) as i32;
        let fill = 0.0f32;
        let f = funcs
            .get("copy_segments")
            .ok_or_else(|| missing("copy_segments"))?;
        let mut b = stream.launch_builder(f);
        match from {
            Buf::A => b.arg(&sc.a),
            Buf::C => b.arg(&sc.c),
        };
        b.arg(&mut nodes[i].out).arg(&sc.seg).arg(&nseg).arg(&fill);
        // SAFETY: offsets come from the layout the buffers were allocated with.
        unsafe { b.launch(blocks(nseg as usize, 256, 0)) }.map_err(cuda_err)?;
        Ok(())
    }

    /// Runs node `i` for the sub-batch: one method per op family (conv.rs, linear.rs,
    /// recurrent.rs, attention.rs, rows.rs), as in the CPU device.
    fn run_node(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<()> {
        let i = at.node.idx();
        match &model.nodes[i].op {
            Op::Input { .. } => self.input(model, i, members),
            Op::Conv2d { .. } => self.conv(model, i, members),
            Op::Pool { .. } => self.pool(model, i, members),
            Op::Linear { .. } => self.linear(model, i, members),
            Op::Lstm { .. } => self.lstm(model, i, members),
            Op::Attention { mode, heads } => self.attention(model, i, members, *mode, *heads),
            Op::Embedding { .. } => self.embedding(model, i, members),
            _ => self.rowwise(model, i, members),
        }
    }

    /// Gathers only the first input's rows (the query) into scratch A; returns the row count.
    fn gather_first_input(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<usize> {
        let node = &model.nodes[i];
        let width: usize = node.in_shapes[0].feat.iter().product();
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let mut rows = 0;
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                layout.input_segs(
                    model,
                    node,
                    &node.inputs[0],
                    m.slot,
                    m.len,
                    step,
                    r,
                    rows * width,
                    |s| self.segs.push(s),
                );
                rows += 1;
            }
        }
        self.copy_segs(Buf::A)?;
        Ok(rows)
    }

    fn capture_outputs(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<()> {
        if !self.capture.wants(model, i) {
            return Ok(());
        }
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let feat = layout.nodes[i].feat;
        let host = self
            .stream
            .clone_dtoh(&self.nodes[i].out)
            .map_err(cuda_err)?;
        let node = &model.nodes[i];
        for m in members {
            let mut v = Vec::new();
            for r in 0..Layout::rows(node, m.len) {
                let o = layout.offset(i, m.slot, layout.out_pos(model, i, m.step, r, m.len));
                v.extend_from_slice(&host[o..o + feat]);
            }
            self.capture.record(model, i, m.step, m.input, v);
        }
        Ok(())
    }
}

impl Device for CudaDevice {
    /// Starts (or stops) capturing final outputs per request, to compare with the CPU device.
    fn set_capture(&mut self, mode: CaptureMode) {
        self.capture = Capture::new(mode);
    }

    /// Takes the captured outputs.
    fn take_captured(&mut self) -> Capture {
        std::mem::take(&mut self.capture)
    }

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn description(&self) -> String {
        format!("cuda ({})", self.name)
    }

    fn is_virtual(&self) -> bool {
        false
    }

    fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()> {
        if max_batch == 0 {
            return Err(Error::invalid("max batch", "must be at least 1"));
        }
        let mb = max_batch as usize;
        let layout = Layout::new(model, mb);
        self.max_dec = model.seq.as_ref().map_or(1, |s| s.max_dec as usize);
        let max_enc = model.seq.as_ref().map_or(1, |s| s.max_enc as usize);
        let mut nodes = Vec::with_capacity(model.nodes.len());
        let (mut need_a, mut need_c, mut need_cols, mut need_rows) = (1usize, 1usize, 1usize, mb);
        for n in &model.nodes {
            let feat = layout.nodes[n.id.idx()].feat;
            let in_feat: usize = n
                .in_shapes
                .iter()
                .map(|s| s.feat.iter().product::<usize>())
                .sum();
            let rows = if n.loop_id.is_some() {
                1
            } else {
                layout.nodes[n.id.idx()].cap.max(1)
            };
            need_rows = need_rows.max(mb * rows);
            need_a = need_a.max(mb * rows * (in_feat + feat + 3 * feat));
            need_c = need_c.max(mb * rows * 4 * feat.max(in_feat));
            if let Op::Conv2d {
                kernel: (kh, kw),
                groups,
                ..
            } = &n.op
            {
                let (c, _, _) = n.in_chw();
                need_cols =
                    need_cols.max(mb * n.out_hw().0 * n.out_hw().1 * (c / groups) * kh * kw);
            }
            if let Op::Lstm { hidden, .. } = &n.op {
                need_c = need_c.max(mb * 4 * hidden);
            }
            let w = weights::generate(model, n, self.seed);
            let state = match &n.op {
                Op::Lstm { hidden, .. } => Some(
                    self.stream
                        .alloc_zeros::<f32>(mb * hidden)
                        .map_err(cuda_err)?,
                ),
                Op::Attention {
                    mode: AttnMode::SelfAttn,
                    ..
                } if n.class == Class::Decoder => Some(
                    self.stream
                        .alloc_zeros::<f32>(mb * self.max_dec * 2 * feat)
                        .map_err(cuda_err)?,
                ),
                _ => None,
            };
            let tied = model.tied_owner(n)?;
            nodes.push(NodeGpu {
                out: self
                    .stream
                    .alloc_zeros::<f32>(layout.buffer_len(n.id.idx()).max(1))
                    .map_err(cuda_err)?,
                // GEMM weights (and tables read by tied GEMMs) also in f16 at f16 precision
                w: self.upload_weights(
                    &w,
                    matches!(
                        n.op,
                        Op::Conv2d { .. }
                            | Op::Linear { .. }
                            | Op::Lstm { .. }
                            | Op::Embedding { .. }
                    ),
                )?,
                state,
                in_feat,
                tied,
            });
        }
        let segs = need_rows * 8 + 64 + mb * max_enc.max(self.max_dec) * 4;
        self.scratch = Some(Scratch {
            a: self.stream.alloc_zeros::<f32>(need_a).map_err(cuda_err)?,
            c: self.stream.alloc_zeros::<f32>(need_c).map_err(cuda_err)?,
            cols: self
                .stream
                .alloc_zeros::<f32>(need_cols)
                .map_err(cuda_err)?,
            seg: self.stream.alloc_zeros::<i64>(3 * segs).map_err(cuda_err)?,
            i32a: self
                .stream
                .alloc_zeros::<i32>(need_rows)
                .map_err(cuda_err)?,
            i64a: self
                .stream
                .alloc_zeros::<i64>(need_rows)
                .map_err(cuda_err)?,
            i64b: self
                .stream
                .alloc_zeros::<i64>(need_rows)
                .map_err(cuda_err)?,
        });
        self.s16 = if self.precision == Precision::F16 {
            let n16 = need_a.max(need_c).max(need_cols);
            Some(Scratch16 {
                a: self
                    .stream
                    .alloc_zeros::<half::f16>(n16)
                    .map_err(cuda_err)?,
                b: self
                    .stream
                    .alloc_zeros::<half::f16>(n16)
                    .map_err(cuda_err)?,
                c: self
                    .stream
                    .alloc_zeros::<half::f16>(n16)
                    .map_err(cuda_err)?,
            })
        } else {
            None
        };
        self.segs = Vec::with_capacity(segs);
        self.seg_host = Vec::with_capacity(3 * segs);
        self.host_i32 = Vec::with_capacity(need_rows);
        self.host_i64 = Vec::with_capacity(need_rows);
        self.host_i64b = Vec::with_capacity(need_rows);
        self.nodes = nodes;
        self.layout = Some(layout);
        self.model_name = model.name.clone();
        self.stream.synchronize().map_err(cuda_err)?;
        Ok(())
    }

    fn execute(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
        if model.name != self.model_name {
            return Err(Error::Internal(format!(
                "cuda device prepared for {}, asked to run {}",
                self.model_name, model.name
            )));
        }
        let mb = self.layout.as_ref().map_or(0, |l| l.max_batch);
        if members.is_empty() || members.len() > mb || members.iter().any(|m| m.slot as usize >= mb)
        {
            return Err(Error::Internal(
                "sub-batch does not fit the prepared slots".into(),
            ));
        }
        if at.step as usize
            >= self
                .max_dec
                .max(model.seq.as_ref().map_or(1, |s| s.max_enc as usize))
        {
            return Err(Error::Internal(
                "step beyond the model's maximum length".into(),
            ));
        }
        self.events.0.record(&self.stream).map_err(cuda_err)?;
        self.run_node(model, at, members)?;
        let (start, end) = &self.events;
        end.record(&self.stream).map_err(cuda_err)?;
        end.synchronize().map_err(cuda_err)?;
        let ms = start.elapsed_ms(end).map_err(cuda_err)?;
        if self.capture.is_on() {
            self.capture_outputs(model, at.node.idx(), members)?;
        }
        Ok(Timing {
            time: Nanos((f64::from(ms) * 1e6).round() as u64),
            ..Timing::default()
        })
    }
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice({}, model {})", self.name, self.model_name)
    }
}
