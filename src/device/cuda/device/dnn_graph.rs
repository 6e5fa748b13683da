//! A convolution at one sub-batch size through cuDNN's graph API (the backend API that
//! cudnn-frontend and PyTorch build on): tensors X, W and Y (NCHW, packed, with the byte
//! alignment their buffers guarantee), a convolution descriptor and a forward-convolution
//! operation in an operation graph; the engine configurations cuDNN's heuristics rank (mode A,
//! then the fallback list); and the first that finalizes into an execution plan whose workspace
//! fits the cap, skipping engines that compile at run time (seconds each, per shape) and, in
//! f32, engines on tensor cores (TF32), as PyTorch does with TF32 off. A call is a variant pack
//! of the three addresses and the workspace, then `cudnnBackendExecute`.

use super::dnn::{data_of, fail, ConvSpec, Data, Dnn, Handle, Ptrs, WORKSPACE_CAP};
use super::*;
use cudarc::cudnn::sys as ds;
use ds::cudnnBackendAttributeName_t as A;
use ds::cudnnBackendAttributeType_t as T;
use ds::cudnnBackendDescriptorType_t as K;

guard!(Desc, ds::cudnnBackendDescriptor_t, destroy);

/// `cudnnBackendDestroyDescriptor`.
///
/// # Safety
/// `d` was made by `cudnnBackendCreateDescriptor` and is destroyed once.
unsafe fn destroy(d: ds::cudnnBackendDescriptor_t) -> Result<(), cudarc::cudnn::CudnnError> {
    ds::cudnnBackendDestroyDescriptor(d).result()
}

/// The tensors' unique ids in the graph and the variant pack.
const X: i64 = 1;
const W: i64 = 2;
const Y: i64 = 3;

/// The most engine configurations read from one heuristic query.
const CONFIGS: usize = 32;

impl Desc {
    fn new(kind: K, what: &str) -> Result<Desc> {
        let mut d = std::ptr::null_mut();
        // SAFETY: writes one descriptor handle.
        unsafe { ds::cudnnBackendCreateDescriptor(kind, &mut d) }
            .result()
            .map_err(fail(format!(
                "cudnnBackendCreateDescriptor({kind:?}) for {what}"
            )))?;
        Ok(Desc(d))
    }

    /// Sets attribute `name` to `vals`, of cuDNN type `ty` (the element type of `V`).
    fn set<V>(&self, name: A, ty: T, vals: &[V], what: &str) -> Result<()> {
        // SAFETY: a live descriptor; `vals` holds `len` elements of the type `ty` names.
        unsafe {
            ds::cudnnBackendSetAttribute(self.0, name, ty, vals.len() as i64, vals.as_ptr().cast())
        }
        .result()
        .map_err(fail(format!("{name:?} of {what}")))
    }

    /// Reads up to `out.len()` elements of attribute `name`; how many there were.
    fn get<V>(&self, name: A, ty: T, out: &mut [V], what: &str) -> Result<usize> {
        let mut n = 0i64;
        // SAFETY: a live descriptor; room for `len` elements of the type `ty` names.
        unsafe {
            ds::cudnnBackendGetAttribute(
                self.0,
                name,
                ty,
                out.len() as i64,
                &mut n,
                out.as_mut_ptr().cast(),
            )
        }
        .result()
        .map_err(fail(format!("reading {name:?} of {what}")))?;
        Ok(n.max(0) as usize)
    }

    fn finalize(&self, what: &str) -> Result<()> {
        // SAFETY: a live descriptor with its attributes set.
        unsafe { ds::cudnnBackendFinalize(self.0) }
            .result()
            .map_err(fail(format!("finalizing {what}")))
    }
}

/// One convolution's execution plan at one sub-batch size.
pub(super) struct GraphPlan {
    plan: Desc,
    /// Bytes of workspace it needs.
    pub(super) workspace: usize,
    /// The engine's global index and its numerical notes (for reports).
    engine: i64,
    notes: Vec<u32>,
    /// The byte alignment of X's and Y's addresses the plan was made for.
    align: [u64; 2],
    /// The graph, configuration and engine the plan was made from, kept as long as it.
    _parts: Vec<Desc>,
}

/// The largest power of two, up to 16, dividing `bytes`: the alignment of an image in a buffer
/// of whole images (allocations start 256-byte aligned on a GPU), as far as cuDNN's vectorized
/// kernels ask (PyTorch declares the same, up to 16).
fn alignment(bytes: usize) -> u64 {
    1 << bytes.trailing_zeros().min(4)
}

impl GraphPlan {
    /// The plan of `spec` at `n` images in `precision`; None when no engine qualifies (all
    /// compile at run time, say).
    pub(super) fn new(
        dnn: &Dnn,
        spec: &ConvSpec,
        n: usize,
        precision: Precision,
    ) -> Result<Option<GraphPlan>> {
        let ConvSpec {
            name,
            chw: (c, h, w),
            out_chw: (co, ho, wo),
            kernel: (kh, kw),
            stride,
            padding,
            groups,
            ..
        } = *spec;
        let data = data_of(precision);
        let what = format!("convolution '{name}' at {n} images");
        // f32 images may be read and written in place at whole-image offsets; f16 ones are
        // always in scratch
        let align = match data {
            Data::F32 => [alignment(c * h * w * 4), alignment(co * ho * wo * 4)],
            Data::F16 => [16, 16],
        };
        let tensor = |uid: i64, dims: [usize; 4], align: u64| -> Result<Desc> {
            let t = Desc::new(K::CUDNN_BACKEND_TENSOR_DESCRIPTOR, &what)?;
            let d = dims.map(|x| x as i64);
            let strides = [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1];
            t.set(
                A::CUDNN_ATTR_TENSOR_DATA_TYPE,
                T::CUDNN_TYPE_DATA_TYPE,
                &[data.dtype()],
                &what,
            )?;
            t.set(
                A::CUDNN_ATTR_TENSOR_DIMENSIONS,
                T::CUDNN_TYPE_INT64,
                &d,
                &what,
            )?;
            t.set(
                A::CUDNN_ATTR_TENSOR_STRIDES,
                T::CUDNN_TYPE_INT64,
                &strides,
                &what,
            )?;
            t.set(
                A::CUDNN_ATTR_TENSOR_UNIQUE_ID,
                T::CUDNN_TYPE_INT64,
                &[uid],
                &what,
            )?;
            let a = align as i64;
            t.set(
                A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
                T::CUDNN_TYPE_INT64,
                &[a],
                &what,
            )?;
            t.finalize(&what)?;
            Ok(t)
        };
        let x = tensor(X, [n, c, h, w], align[0])?;
        let wt = tensor(W, [co, c / groups, kh, kw], 16)?;
        let y = tensor(Y, [n, co, ho, wo], align[1])?;
        let conv = Desc::new(K::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &what)?;
        let (s, p) = (stride as i64, padding as i64);
        let f32t = ds::cudnnDataType_t::CUDNN_DATA_FLOAT;
        conv.set(
            A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
            T::CUDNN_TYPE_INT64,
            &[2i64],
            &what,
        )?;
        conv.set(
            A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
            T::CUDNN_TYPE_DATA_TYPE,
            &[f32t],
            &what,
        )?;
        let mode = ds::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION;
        conv.set(
            A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
            T::CUDNN_TYPE_CONVOLUTION_MODE,
            &[mode],
            &what,
        )?;
        conv.set(
            A::CUDNN_ATTR_CONVOLUTION_DILATIONS,
            T::CUDNN_TYPE_INT64,
            &[1i64, 1],
            &what,
        )?;
        conv.set(
            A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
            T::CUDNN_TYPE_INT64,
            &[s, s],
            &what,
        )?;
        conv.set(
            A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
            T::CUDNN_TYPE_INT64,
            &[p, p],
            &what,
        )?;
        conv.set(
            A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
            T::CUDNN_TYPE_INT64,
            &[p, p],
            &what,
        )?;
        conv.finalize(&what)?;
        let op = Desc::new(
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            &what,
        )?;
        let bd = T::CUDNN_TYPE_BACKEND_DESCRIPTOR;
        op.set(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
            bd,
            &[x.0],
            &what,
        )?;
        op.set(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
            bd,
            &[wt.0],
            &what,
        )?;
        op.set(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            bd,
            &[y.0],
            &what,
        )?;
        op.set(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
            bd,
            &[conv.0],
            &what,
        )?;
        op.set(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
            T::CUDNN_TYPE_FLOAT,
            &[1.0f32],
            &what,
        )?;
        op.set(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            T::CUDNN_TYPE_FLOAT,
            &[0.0f32],
            &what,
        )?;
        op.finalize(&what)?;
        let graph = Desc::new(K::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &what)?;
        graph.set(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, bd, &[op.0], &what)?;
        graph.set(
            A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
            T::CUDNN_TYPE_HANDLE,
            &[dnn.handle.0],
            &what,
        )?;
        graph.finalize(&what)?;
        for mode in [
            ds::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A,
            ds::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK,
        ] {
            let heur = Desc::new(K::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &what)?;
            heur.set(
                A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                bd,
                &[graph.0],
                &what,
            )?;
            heur.set(
                A::CUDNN_ATTR_ENGINEHEUR_MODE,
                T::CUDNN_TYPE_HEUR_MODE,
                &[mode],
                &what,
            )?;
            heur.finalize(&what)?;
            let mut available = 0i64;
            // SAFETY: a count-only query (no array).
            unsafe {
                ds::cudnnBackendGetAttribute(
                    heur.0,
                    A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                    bd,
                    0,
                    &mut available,
                    std::ptr::null_mut(),
                )
            }
            .result()
            .map_err(fail(format!(
                "counting the engine configurations of {what}"
            )))?;
            let count = (available.max(0) as usize).min(CONFIGS);
            let cfgs: Vec<Desc> = (0..count)
                .map(|_| Desc::new(K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &what))
                .collect::<Result<_>>()?;
            let mut raw: Vec<ds::cudnnBackendDescriptor_t> = cfgs.iter().map(|d| d.0).collect();
            let got = heur.get(A::CUDNN_ATTR_ENGINEHEUR_RESULTS, bd, &mut raw, &what)?;
            for cfg in cfgs.into_iter().take(got) {
                let engine = Desc::new(K::CUDNN_BACKEND_ENGINE_DESCRIPTOR, &what)?;
                cfg.get(A::CUDNN_ATTR_ENGINECFG_ENGINE, bd, &mut [engine.0], &what)?;
                let mut notes = [0u32; 16];
                let nn = engine.get(
                    A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                    T::CUDNN_TYPE_NUMERICAL_NOTE,
                    &mut notes,
                    &what,
                )?;
                let mut behaviors = [0u32; 16];
                let nb = engine.get(
                    A::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                    T::CUDNN_TYPE_BEHAVIOR_NOTE,
                    &mut behaviors,
                    &what,
                )?;
                let mut index = [0i64];
                engine.get(
                    A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                    T::CUDNN_TYPE_INT64,
                    &mut index,
                    &what,
                )?;
                let notes = notes[..nn.min(16)].to_vec();
                if refused(precision, &notes, &behaviors[..nb.min(16)]).is_some() {
                    continue;
                }
                let plan = Desc::new(K::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &what)?;
                plan.set(
                    A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                    T::CUDNN_TYPE_HANDLE,
                    &[dnn.handle.0],
                    &what,
                )?;
                plan.set(
                    A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                    bd,
                    &[cfg.0],
                    &what,
                )?;
                if plan.finalize(&what).is_err() {
                    // an engine the heuristics rank may still not support this shape
                    continue;
                }
                let mut ws = [0i64];
                plan.get(
                    A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                    T::CUDNN_TYPE_INT64,
                    &mut ws,
                    &what,
                )?;
                let workspace = ws[0].max(0) as usize;
                if workspace > WORKSPACE_CAP {
                    continue;
                }
                return Ok(Some(GraphPlan {
                    plan,
                    workspace,
                    engine: index[0],
                    notes,
                    align,
                    _parts: vec![x, wt, y, conv, op, graph, cfg, engine],
                }));
            }
        }
        Ok(None)
    }

    /// The engine, for reports: its global index and numerical notes.
    pub(super) fn describe(&self) -> String {
        format!("graph engine {} notes {:?}", self.engine, self.notes)
    }

    /// Runs the plan on `ptrs`.
    pub(super) fn execute(&self, handle: &Handle, ptrs: &Ptrs) -> Result<()> {
        for (p, a, which) in [(ptrs.x, self.align[0], "X"), (ptrs.y, self.align[1], "Y")] {
            if p % a != 0 {
                return Err(Error::Internal(format!(
                    "cuda device: cuDNN plan made for {which} at {a}-byte alignment, given {p:#x}"
                )));
            }
        }
        if ptrs.ws.1 < self.workspace {
            return Err(Error::Internal(format!(
                "cuda device: cuDNN workspace of {} bytes, the plan needs {}",
                ptrs.ws.1, self.workspace
            )));
        }
        let what = "a convolution's variant pack";
        let vp = Desc::new(K::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what)?;
        let addrs: [*mut std::ffi::c_void; 3] = [ptrs.x, ptrs.w, ptrs.y].map(|p| p as _);
        let ws: *mut std::ffi::c_void = if self.workspace == 0 {
            std::ptr::null_mut()
        } else {
            ptrs.ws.0 as _
        };
        vp.set(
            A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
            T::CUDNN_TYPE_INT64,
            &[X, W, Y],
            what,
        )?;
        vp.set(
            A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            T::CUDNN_TYPE_VOID_PTR,
            &addrs,
            what,
        )?;
        vp.set(
            A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            T::CUDNN_TYPE_VOID_PTR,
            &[ws],
            what,
        )?;
        vp.finalize(what)?;
        // SAFETY: the plan was made for these tensors' shapes and alignment (checked above), the
        // addresses lie in buffers sized at prepare, the workspace holds what the plan needs.
        unsafe { ds::cudnnBackendExecute(handle.0, self.plan.0, vp.0) }
            .result()
            .map_err(fail(format!(
                "cudnnBackendExecute (engine {})",
                self.engine
            )))
    }
}

/// Why an engine with these numerical and behavior notes is not used at `precision`, if it is
/// not: run-time compilation (seconds per plan), and in f32 tensor cores (TF32), converted
/// inputs or reduced-precision sums; in f16, reduced-precision sums (f32 accumulation is kept).
fn refused(precision: Precision, notes: &[u32], behaviors: &[u32]) -> Option<&'static str> {
    use ds::cudnnBackendNumericalNote_t as N;
    let has = |n: N| notes.contains(&(n as u32));
    let compiles = behaviors.contains(
        &(ds::cudnnBackendBehaviorNote_t::CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION as u32),
    );
    if compiles {
        return Some("compiles at run time");
    }
    match precision {
        Precision::F32 if has(N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE) => {
            Some("runs on tensor cores (TF32)")
        }
        Precision::F32 if has(N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) => {
            Some("converts its inputs down")
        }
        Precision::F32 | Precision::F16
            if has(N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) =>
        {
            Some("sums in reduced precision")
        }
        Precision::F32 | Precision::F16 | Precision::Tf32 => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ds::cudnnBackendNumericalNote_t as N;

    #[test]
    fn engines_are_refused_for_tf32_in_f32_and_for_run_time_compilation() {
        let tc = [N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE as u32];
        assert!(refused(Precision::F32, &tc, &[]).is_some());
        assert!(refused(Precision::Tf32, &tc, &[]).is_none());
        assert!(refused(Precision::F16, &tc, &[]).is_none());
        let rpr = [N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION as u32];
        assert!(refused(Precision::F16, &rpr, &[]).is_some());
        let compiles =
            [ds::cudnnBackendBehaviorNote_t::CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION as u32];
        assert!(refused(Precision::F16, &[], &compiles).is_some());
        assert!(refused(Precision::F32, &[], &[]).is_none());
    }

    #[test]
    fn an_image_in_a_buffer_of_whole_images_is_aligned_to_its_size_up_to_16_bytes() {
        assert_eq!(alignment(64 * 56 * 56 * 4), 16);
        assert_eq!(alignment(3 * 7 * 7 * 4), 4);
        assert_eq!(alignment(2 * 9 * 4), 8);
    }
}
