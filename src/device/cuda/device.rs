//! The CUDA device: the CPU device's layout ([`Layout`]) and weights on the GPU. Every node's
//! output buffer, LSTM cell states, K|V caches and scratch are allocated at
//! [`Device::prepare`] for the maximum batch; serving only launches kernels and copies into those
//! buffers. A node's input rows are assembled by one `copy_segments` launch per source buffer
//! (the gather that preemption and merging need), computed in scratch, and scattered back to the
//! members' slots. GEMMs run in cuBLAS (row-major via the transposed column-major call),
//! everything else in the NVRTC-compiled kernels of `kernels/`. Node time: CUDA events.

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

    /// Row-major `C[m×n] = op(A)[m×k] · op(B)[k×n]` in cuBLAS (column-major, see [`row_major`]),
    /// `batch.count` times with operands `batch.a`/`batch.b`/`batch.c` elements apart (one call:
    /// a strided-batched GEMM when the count exceeds one): `a_t`/`b_t` mean the buffer holds the
    /// operand transposed; `lda`/`ldb`/`ldc` are row strides. f32 operands go straight to
    /// cuBLAS; with an f16 operand, the f32 one is converted to f16 scratch, cuBLAS multiplies f16
    /// with f32 accumulation into compact f16 scratch, and the result is converted back into `c`.
    #[allow(clippy::too_many_arguments)]
    fn gemm_p(
        s16: Option<&mut Scratch16>,
        blas: &CudaBlas,
        stream: &Arc<CudaStream>,
        funcs: &HashMap<String, CudaFunction>,
        (m, n, k): (usize, usize, usize),
        (a, a_t, lda): (Operand, bool, usize),
        (b, b_t, ldb): (Operand, bool, usize),
        c: &mut cudarc::driver::CudaViewMut<f32>,
        ldc: usize,
        batch: Strides,
    ) -> Result<()> {
        if let (Operand::F(a), Operand::F(b)) = (&a, &b) {
            let cfg = row_major(m, n, k, (a_t, lda), (b_t, ldb), ldc, 1.0f32, 0.0f32);
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
            m,
            n,
            k,
            (a_t, lda),
            (b_t, ldb),
            n,
            half::f16::ONE,
            half::f16::ZERO,
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

    fn run_node(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<()> {
        let i = at.node.idx();
        let node = &model.nodes[i];
        let feat = self.layout.as_ref().ok_or_else(|| missing("layout"))?.nodes[i].feat;
        match &node.op {
            Op::Input { shape, tokens, .. } => {
                let f: usize = shape.iter().product();
                for m in members {
                    let rows = Layout::rows(node, m.len);
                    let off = self
                        .layout
                        .as_ref()
                        .ok_or_else(|| missing("layout"))?
                        .offset(i, m.slot, 0);
                    self.host_in.resize(rows * f, 0.0);
                    weights::fill_input(&mut self.host_in, self.seed, m.input, i as u64, *tokens);
                    self.stream
                        .memcpy_htod(
                            &self.host_in[..],
                            &mut self.nodes[i].out.slice_mut(off..off + rows * f),
                        )
                        .map_err(cuda_err)?;
                }
            }
            Op::Conv2d {
                kernel: (kh, kw),
                stride,
                padding,
                groups,
                act,
                ..
            } => {
                let (c, h, w) = (
                    node.in_shapes[0].feat[0],
                    node.in_shapes[0].feat[1],
                    node.in_shapes[0].feat[2],
                );
                let (ho, wo) = (node.out.feat[1], node.out.feat[2]);
                let p = ho * wo;
                let co = node.out.feat[0];
                let g = *groups;
                let (cg, cog) = (c / g, co / g);
                let kk = cg * kh * kw;
                let depthwise = node.op.is_depthwise(c);
                let pointwise = (*kh, *kw, *stride, *padding) == (1, 1, 1, 0);
                let ints = [
                    c as i32,
                    h as i32,
                    w as i32,
                    *kh as i32,
                    *kw as i32,
                    *stride as i32,
                    *padding as i32,
                    ho as i32,
                    wo as i32,
                ];
                let ak = act_code(*act);
                // the whole sub-batch at once: images one after another in A (c·h·w apart),
                // their columns in `cols` (kk·p apart), outputs in C (co·p apart)
                let nimg = self.gather(model, i, members)?;
                let nimg_i = nimg as i32;
                let CudaDevice {
                    stream,
                    funcs,
                    nodes,
                    scratch,
                    blas,
                    s16,
                    ..
                } = self;
                let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
                let wts = &nodes[i].w;
                let wv = wts.w.as_ref().ok_or_else(|| missing("conv weights"))?;
                if depthwise {
                    let f = funcs.get("depthwise").ok_or_else(|| missing("depthwise"))?;
                    let mut b = stream.launch_builder(f);
                    b.arg(&sc.a).arg(wv).arg(&mut sc.c);
                    for v in &ints {
                        b.arg(v);
                    }
                    b.arg(&nimg_i);
                    // SAFETY: nimg images in A, C holds nimg·co·p outputs (prepare sized them).
                    unsafe { b.launch(elems(nimg * c * p)) }.map_err(cuda_err)?;
                } else {
                    let x_img = (c * h * w) as i64;
                    for gi in 0..g {
                        if !pointwise {
                            let f = funcs.get("im2col_kp").ok_or_else(|| missing("im2col_kp"))?;
                            let (c0, cgi) = ((gi * cg) as i32, cg as i32);
                            let mut b = stream.launch_builder(f);
                            b.arg(&sc.a)
                                .arg(&mut sc.cols)
                                .arg(&ints[1])
                                .arg(&ints[2])
                                .arg(&c0)
                                .arg(&cgi);
                            for v in &ints[3..] {
                                b.arg(v);
                            }
                            b.arg(&nimg_i).arg(&x_img);
                            // SAFETY: cols holds max_batch·kk·p elements (prepare sized it).
                            unsafe { b.launch(elems(nimg * kk * p)) }.map_err(cuda_err)?;
                        }
                        // per image: out[cog × p] (channel-major) = Wgᵀ[cog × kk] · cols[kk × p]
                        let range = gi * kk * cog..(gi + 1) * kk * cog;
                        let wop = match &wts.w16 {
                            Some(h) => Operand::H(h.slice(range)),
                            None => Operand::F(wv.slice(range)),
                        };
                        let mut cv = sc.c.slice_mut(gi * cog * p..nimg * co * p);
                        let (act_op, act_stride) = if pointwise {
                            (Operand::F(sc.a.slice(gi * cg * p..nimg * c * p)), c * p)
                        } else {
                            (Operand::F(sc.cols.slice(..nimg * kk * p)), kk * p)
                        };
                        Self::gemm_p(
                            s16.as_mut(),
                            blas,
                            stream,
                            funcs,
                            (cog, p, kk),
                            (wop, true, cog),
                            (act_op, false, p),
                            &mut cv,
                            p,
                            Strides {
                                count: nimg,
                                a: 0,
                                b: act_stride,
                                c: co * p,
                            },
                        )?;
                    }
                }
                let f = funcs
                    .get("channel_epilogue")
                    .ok_or_else(|| missing("channel_epilogue"))?;
                let null = 0u64;
                let (co_i, p_i) = (co as i32, p as i32);
                let mut b = stream.launch_builder(f);
                b.arg(&mut sc.c);
                match &wts.scale {
                    Some(s) => b.arg(s),
                    None => b.arg(&null),
                };
                match &wts.shift {
                    Some(s) => b.arg(s),
                    None => b.arg(&null),
                };
                b.arg(&co_i).arg(&p_i).arg(&ak).arg(&nimg_i);
                // SAFETY: C holds nimg·co·p outputs.
                unsafe { b.launch(elems(nimg * co * p)) }.map_err(cuda_err)?;
                self.scatter(model, i, members, Buf::C)?;
            }
            Op::Pool {
                kind,
                kernel,
                stride,
                padding,
            } => {
                let (c, h, w) = (
                    node.in_shapes[0].feat[0],
                    node.in_shapes[0].feat[1],
                    node.in_shapes[0].feat[2],
                );
                let (ho, wo) = (node.out.feat[1], node.out.feat[2]);
                let (k, s, pd, kd) = match kind {
                    PoolKind::GlobalAvg => (h.max(w), 1, 0, 1),
                    PoolKind::Max => (*kernel, *stride, *padding, 0),
                    PoolKind::Avg => (*kernel, *stride, *padding, 1),
                };
                let nimg = self.gather(model, i, members)?;
                let CudaDevice {
                    stream,
                    funcs,
                    scratch,
                    ..
                } = self;
                let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
                let f = funcs.get("pool2d").ok_or_else(|| missing("pool2d"))?;
                let v = [
                    c as i32,
                    h as i32,
                    w as i32,
                    k as i32,
                    s as i32,
                    pd as i32,
                    ho as i32,
                    wo as i32,
                    kd,
                    nimg as i32,
                ];
                let mut b = stream.launch_builder(f);
                b.arg(&sc.a).arg(&mut sc.c);
                for x in &v {
                    b.arg(x);
                }
                // SAFETY: nimg images in, nimg·c·ho·wo out, both within the scratch.
                unsafe { b.launch(elems(nimg * c * ho * wo)) }.map_err(cuda_err)?;
                self.scatter(model, i, members, Buf::C)?;
            }
            Op::Linear { act, .. } => {
                let rows = self.gather(model, i, members)?;
                let k = self.nodes[i].in_feat;
                let CudaDevice {
                    stream,
                    funcs,
                    nodes,
                    scratch,
                    blas,
                    s16,
                    ..
                } = self;
                let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
                let av = sc.a.slice(..rows * k);
                let mut cv = sc.c.slice_mut(..rows * feat);
                // the tied table is [feat × k]: read it transposed
                let (owner, transposed, ld) = match nodes[i].tied {
                    Some(t) => (t, true, k),
                    None => (i, false, feat),
                };
                let w = &nodes[owner].w;
                let wop = match (&w.w16, &w.w) {
                    (Some(h), _) => Operand::H(h.slice(..)),
                    (None, Some(f)) => Operand::F(f.slice(..)),
                    (None, None) => return Err(missing("linear weights")),
                };
                Self::gemm_p(
                    s16.as_mut(),
                    blas,
                    stream,
                    funcs,
                    (rows, feat, k),
                    (Operand::F(av), false, k),
                    (wop, transposed, ld),
                    &mut cv,
                    feat,
                    Strides::ONE,
                )?;
                let f = funcs.get("bias_act").ok_or_else(|| missing("bias_act"))?;
                let null = 0u64;
                let (r_i, n_i, a_i) = (rows as i32, feat as i32, act_code(*act));
                let mut b = stream.launch_builder(f);
                b.arg(&mut sc.c);
                match &nodes[i].w.bias {
                    Some(bb) => b.arg(bb),
                    None => b.arg(&null),
                };
                b.arg(&r_i).arg(&n_i).arg(&a_i);
                // SAFETY: rows·feat outputs in C.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                self.scatter(model, i, members, Buf::C)?;
            }
            Op::Lstm { hidden, .. } => {
                let h = *hidden;
                let kx = self.nodes[i].in_feat;
                let k = kx + h;
                // [x ; h_prev] rows: inputs, then this node's previous step (or zeros)
                let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
                for (r, m) in members.iter().enumerate() {
                    let step = m.step;
                    let mut off = r * k;
                    for (q, inp) in node.inputs.iter().enumerate() {
                        layout.input_segs(model, node, inp, m.slot, m.len, step, 0, off, |s| {
                            self.segs.push(s)
                        });
                        off += node.in_shapes[q].feat.iter().product::<usize>();
                    }
                    let src = if step == 0 {
                        Src::Fill(0.0)
                    } else {
                        Src::Node {
                            node: i,
                            off: layout.offset(i, m.slot, layout.pos(model, i, step - 1, m.len)),
                        }
                    };
                    self.segs.push(Seg {
                        src,
                        dst: off,
                        len: h,
                    });
                }
                self.copy_segs(Buf::A)?;
                self.host_i32.clear();
                self.host_i32.extend(members.iter().map(|m| m.slot as i32));
                self.host_i32
                    .extend(members.iter().map(|m| i32::from(m.step == 0)));
                let rows = members.len();
                let CudaDevice {
                    stream,
                    funcs,
                    nodes,
                    scratch,
                    blas,
                    s16,
                    host_i32,
                    ..
                } = self;
                let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
                stream
                    .memcpy_htod(&host_i32[..], &mut sc.i32a.slice_mut(..2 * rows))
                    .map_err(cuda_err)?;
                {
                    let av = sc.a.slice(..rows * k);
                    let mut cv = sc.c.slice_mut(..rows * 4 * h);
                    let w = &nodes[i].w;
                    let wop = match (&w.w16, &w.w) {
                        (Some(x), _) => Operand::H(x.slice(..)),
                        (None, Some(f)) => Operand::F(f.slice(..)),
                        (None, None) => return Err(missing("lstm weights")),
                    };
                    Self::gemm_p(
                        s16.as_mut(),
                        blas,
                        stream,
                        funcs,
                        (rows, 4 * h, k),
                        (Operand::F(av), false, k),
                        (wop, false, 4 * h),
                        &mut cv,
                        4 * h,
                        Strides::ONE,
                    )?;
                }
                let f = funcs.get("lstm_cell").ok_or_else(|| missing("lstm_cell"))?;
                let NodeGpu { w, state, .. } = &mut nodes[i];
                let bias = w.bias.as_ref().ok_or_else(|| missing("lstm bias"))?;
                let cstate = state.as_mut().ok_or_else(|| missing("lstm state"))?;
                let (r_i, h_i) = (rows as i32, h as i32);
                let (slots_v, reset_v) = (sc.i32a.slice(..rows), sc.i32a.slice(rows..2 * rows));
                let mut b = stream.launch_builder(f);
                b.arg(&sc.c)
                    .arg(bias)
                    .arg(cstate)
                    .arg(&slots_v)
                    .arg(&reset_v)
                    .arg(&mut sc.a)
                    .arg(&r_i)
                    .arg(&h_i);
                // SAFETY: rows·4h gates in C, rows·h outputs into A, states indexed by slot.
                unsafe { b.launch(elems(rows * h)) }.map_err(cuda_err)?;
                self.scatter(model, i, members, Buf::A)?;
            }
            Op::Attention { mode, heads } => self.attention(model, i, members, *mode, *heads)?,
            Op::Embedding {
                vocab,
                dim,
                scale,
                positional,
                positions,
                ..
            } => {
                let rows = self.gather(model, i, members)?;
                self.host_i32.clear();
                for m in members {
                    let step = m.step;
                    for r in 0..Layout::rows(node, m.len) {
                        self.host_i32.push(if node.loop_id.is_some() {
                            step as i32
                        } else {
                            r as i32
                        });
                    }
                }
                let CudaDevice {
                    stream,
                    funcs,
                    nodes,
                    scratch,
                    host_i32,
                    ..
                } = self;
                let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
                stream
                    .memcpy_htod(&host_i32[..], &mut sc.i32a.slice_mut(..rows))
                    .map_err(cuda_err)?;
                let table = match nodes[i].tied {
                    Some(t) => nodes[t].w.w.as_ref(),
                    None => nodes[i].w.w.as_ref(),
                }
                .ok_or_else(|| missing("embedding table"))?;
                let null = 0u64;
                let f = funcs
                    .get("embedding_rows")
                    .ok_or_else(|| missing("embedding_rows"))?;
                let pcode = match positional {
                    PosEnc::None => 0i32,
                    PosEnc::Sinusoidal => 1,
                    PosEnc::Learned => 2,
                };
                let v = [
                    rows as i32,
                    *dim as i32,
                    *vocab as i32,
                    i32::from(*scale),
                    pcode,
                    (*positions).max(1) as i32,
                ];
                let mut b = stream.launch_builder(f);
                b.arg(&sc.a).arg(&sc.i32a).arg(table);
                match &nodes[i].w.extra {
                    Some(e) => b.arg(e),
                    None => b.arg(&null),
                };
                match &nodes[i].w.bias {
                    Some(e) => b.arg(e),
                    None => b.arg(&null),
                };
                b.arg(&mut sc.c);
                for x in &v {
                    b.arg(x);
                }
                // SAFETY: rows ids in A, rows·dim outputs in C.
                unsafe { b.launch(elems(rows * dim)) }.map_err(cuda_err)?;
                self.scatter(model, i, members, Buf::C)?;
            }
            _ => self.rowwise(model, i, members)?,
        }
        Ok(())
    }

    fn rowwise(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<()> {
        let node = &model.nodes[i];
        let rows = self.gather(model, i, members)?;
        let kin = self.nodes[i].in_feat;
        let feat = self.layout.as_ref().ok_or_else(|| missing("layout"))?.nodes[i].feat;
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let null = 0u64;
        let (r_i, n_i) = (rows as i32, feat as i32);
        let get = |n: &str| funcs.get(n).ok_or_else(|| missing(n));
        let from = match &node.op {
            Op::Flatten | Op::Concat | Op::Take { .. } => Buf::A,
            Op::Add { act } => {
                let parts = (kin / feat.max(1)) as i32;
                let a_i = act_code(*act);
                let mut b = stream.launch_builder(get("sum_parts")?);
                b.arg(&sc.a)
                    .arg(&mut sc.c)
                    .arg(&r_i)
                    .arg(&n_i)
                    .arg(&parts)
                    .arg(&a_i);
                // SAFETY: rows·parts·feat inputs, rows·feat outputs.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                Buf::C
            }
            Op::Activation { kind } => {
                let a_i = act_code(*kind);
                let mut b = stream.launch_builder(get("bias_act")?);
                b.arg(&mut sc.a).arg(&null).arg(&r_i).arg(&n_i).arg(&a_i);
                // SAFETY: rows·feat values in A, in place.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                Buf::A
            }
            Op::BatchNorm => {
                let per = (feat / node.out.feat[0].max(1)) as i32;
                let w = &nodes[i].w;
                let mut b = stream.launch_builder(get("batchnorm_rows")?);
                b.arg(&sc.a)
                    .arg(&mut sc.c)
                    .arg(w.scale.as_ref().ok_or_else(|| missing("bn scale"))?)
                    .arg(w.shift.as_ref().ok_or_else(|| missing("bn shift"))?)
                    .arg(&r_i)
                    .arg(&n_i)
                    .arg(&per);
                // SAFETY: rows·feat values.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                Buf::C
            }
            Op::LayerNorm => {
                let w = &nodes[i].w;
                let mut b = stream.launch_builder(get("layernorm_rows")?);
                b.arg(&sc.a)
                    .arg(&mut sc.c)
                    .arg(w.scale.as_ref().ok_or_else(|| missing("ln gamma"))?)
                    .arg(w.shift.as_ref().ok_or_else(|| missing("ln beta"))?)
                    .arg(&n_i);
                // SAFETY: one block per row.
                unsafe { b.launch(blocks(rows, 256, 0)) }.map_err(cuda_err)?;
                Buf::C
            }
            Op::Softmax => {
                let one = 1.0f32;
                let mut b = stream.launch_builder(get("softmax_rows")?);
                b.arg(&sc.a).arg(&mut sc.c).arg(&n_i).arg(&one);
                // SAFETY: one block per row.
                unsafe { b.launch(blocks(rows, 256, 0)) }.map_err(cuda_err)?;
                Buf::C
            }
            Op::Argmax => {
                let k_i = kin as i32;
                let mut b = stream.launch_builder(get("argmax_rows")?);
                b.arg(&sc.a).arg(&mut sc.c).arg(&k_i);
                // SAFETY: one block of 1024 threads per row (the kernel's shared arrays).
                unsafe { b.launch(blocks(rows, 1024, 0)) }.map_err(cuda_err)?;
                Buf::C
            }
            other => {
                return Err(Error::Internal(format!(
                    "cuda device: no kernel for op {}",
                    other.kind_name()
                )))
            }
        };
        self.scatter(model, i, members, from)
    }

    fn attention(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        mode: AttnMode,
        heads: usize,
    ) -> Result<()> {
        let node = &model.nodes[i];
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let d = layout.nodes[i].feat;
        let max_dec = self.max_dec;
        self.host_i64.clear();
        self.host_i64b.clear();
        self.host_i32.clear();
        // per query row: key and value base offsets and key counts; then the strides
        let (qstride, kv_node, kstride, vstride, dh, dv, additive): AttnShape;
        match mode {
            AttnMode::Additive | AttnMode::Dot => {
                let kp = node.inputs[1].node.idx();
                let vp = node.inputs[2].node.idx();
                for m in members {
                    self.host_i64.push(layout.offset(kp, m.slot, 0) as i64);
                    self.host_i64b.push(layout.offset(vp, m.slot, 0) as i64);
                    self.host_i32
                        .push(Layout::valid_rows(model, kp, m.len) as i32);
                }
                qstride = node.in_shapes[0].feat[0];
                kv_node = Some((kp, vp));
                kstride = layout.nodes[kp].feat;
                vstride = layout.nodes[vp].feat;
                dh = qstride;
                dv = d;
                additive = mode == AttnMode::Additive;
            }
            AttnMode::SelfAttn if node.class == Class::Decoder => {
                for m in members {
                    let step = m.step;
                    let base = m.slot as usize * max_dec * 2 * d;
                    self.host_i64.push(base as i64);
                    self.host_i64b.push((base + d) as i64);
                    self.host_i32.push(step as i32 + 1);
                }
                qstride = 3 * d;
                kv_node = None;
                kstride = 2 * d;
                vstride = 2 * d;
                dh = d / heads;
                dv = d / heads;
                additive = false;
            }
            AttnMode::SelfAttn => {
                let p = node.inputs[0].node.idx();
                for m in members {
                    let rows = Layout::rows(node, m.len);
                    for _ in 0..rows {
                        self.host_i64.push((layout.offset(p, m.slot, 0) + d) as i64);
                        self.host_i64b
                            .push((layout.offset(p, m.slot, 0) + 2 * d) as i64);
                        self.host_i32.push(rows as i32);
                    }
                }
                qstride = 3 * d;
                kv_node = Some((p, p));
                kstride = 3 * d;
                vstride = 3 * d;
                dh = d / heads;
                dv = d / heads;
                additive = false;
            }
            AttnMode::Cross => {
                let kvp = node.inputs[1].node.idx();
                for m in members {
                    for _ in 0..Layout::rows(node, m.len) {
                        self.host_i64.push(layout.offset(kvp, m.slot, 0) as i64);
                        self.host_i64b
                            .push((layout.offset(kvp, m.slot, 0) + d) as i64);
                        self.host_i32
                            .push(Layout::valid_rows(model, kvp, m.len) as i32);
                    }
                }
                qstride = d;
                kv_node = Some((kvp, kvp));
                kstride = 2 * d;
                vstride = 2 * d;
                dh = d / heads;
                dv = d / heads;
                additive = false;
            }
        }
        let qrows = self.gather_first_input(model, i, members)?;
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            host_i64,
            host_i64b,
            host_i32,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        stream
            .memcpy_htod(&host_i64[..], &mut sc.i64a.slice_mut(..qrows))
            .map_err(cuda_err)?;
        stream
            .memcpy_htod(&host_i64b[..], &mut sc.i64b.slice_mut(..qrows))
            .map_err(cuda_err)?;
        stream
            .memcpy_htod(&host_i32[..], &mut sc.i32a.slice_mut(..qrows))
            .map_err(cuda_err)?;
        if kv_node.is_none() {
            // append this step's K|V (columns d..3d of the gathered rows) to each member's cache
            let f = funcs
                .get("copy_segments")
                .ok_or_else(|| missing("copy_segments"))?;
            let segs: Vec<i64> = members
                .iter()
                .enumerate()
                .flat_map(|(r, m)| {
                    [
                        (r * 3 * d + d) as i64,
                        (m.slot as usize * max_dec * 2 * d + m.step as usize * 2 * d) as i64,
                        (2 * d) as i64,
                    ]
                })
                .collect();
            stream
                .memcpy_htod(&segs[..], &mut sc.seg.slice_mut(..segs.len()))
                .map_err(cuda_err)?;
            let n = (segs.len() / 3) as i32;
            let fill = 0.0f32;
            let cache = nodes[i].state.as_mut().ok_or_else(|| missing("kv cache"))?;
            let mut b = stream.launch_builder(f);
            b.arg(&sc.a).arg(cache).arg(&sc.seg).arg(&n).arg(&fill);
            // SAFETY: the cache holds max_dec steps per slot; step < max_dec (checked in execute).
            unsafe { b.launch(blocks(n as usize, 256, 0)) }.map_err(cuda_err)?;
        }
        let max_keys = host_i32.iter().copied().max().unwrap_or(1).max(1) as u32;
        // multi-head attention scales by 1/sqrt(head width); LAS's content attention does not
        let scale = if matches!(mode, AttnMode::Dot | AttnMode::Additive) {
            1.0
        } else {
            1.0 / (dh as f32).sqrt()
        };
        let null = 0u64;
        let ints = [
            kstride as i32,
            vstride as i32,
            heads as i32,
            dh as i32,
            dv as i32,
        ];
        let (q_i, o_i, mode_i) = (qstride as i32, d as i32, i32::from(additive));
        let f = funcs
            .get("attend_rows")
            .ok_or_else(|| missing("attend_rows"))?;
        let (kbuf, vbuf) = match kv_node {
            Some((kp, vp)) => (&nodes[kp].out, &nodes[vp].out),
            None => {
                let c = nodes[i].state.as_ref().ok_or_else(|| missing("kv cache"))?;
                (c, c)
            }
        };
        let w = &nodes[i].w;
        let mut b = stream.launch_builder(f);
        b.arg(&sc.a)
            .arg(&q_i)
            .arg(kbuf)
            .arg(vbuf)
            .arg(&sc.i64a)
            .arg(&sc.i64b)
            .arg(&sc.i32a);
        for x in &ints {
            b.arg(x);
        }
        b.arg(&scale).arg(&mode_i);
        match (&w.w, &w.bias) {
            (Some(vn), Some(bb)) if additive => b.arg(vn).arg(bb),
            _ => b.arg(&null).arg(&null),
        };
        b.arg(&mut sc.c).arg(&o_i);
        let rows_heads = qrows * heads;
        // SAFETY: one block per (query row, head); scores in dynamic shared memory.
        unsafe { b.launch(blocks(rows_heads, 128, 4 * max_keys)) }.map_err(cuda_err)?;
        self.scatter(model, i, members, Buf::C)
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
                let c = n.in_shapes[0].feat[0];
                need_cols =
                    need_cols.max(mb * n.out.feat[1] * n.out.feat[2] * (c / groups) * kh * kw);
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

/// The cuBLAS (column-major) configuration of the row-major product `C[m×n] = op(A)·op(B)`:
/// cuBLAS computes `Cᵀ = op(B)ᵀ·op(A)ᵀ`, so B comes first. `(t, ld)` per operand: whether the
/// buffer holds it transposed, and its row stride.
#[allow(clippy::too_many_arguments)]
fn row_major<T>(
    m: usize,
    n: usize,
    k: usize,
    (a_t, lda): (bool, usize),
    (b_t, ldb): (bool, usize),
    ldc: usize,
    alpha: T,
    beta: T,
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
