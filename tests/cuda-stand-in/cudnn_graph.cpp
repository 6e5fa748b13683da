// The cuDNN stand-in's graph (backend) API, as lazybatch's CUDA device calls it for a
// convolution: backend descriptors of tensors, a convolution, a forward-convolution operation,
// an operation graph, engine heuristics, engine configurations and engines, execution plans
// and variant packs, each an attribute store of its own kind; cudnnBackendExecute computes the
// convolution (cudnn_conv.h). It checks what cuDNN checks and says why it refuses: an
// attribute its descriptor kind does not have, of another type, or set after finalizing; a
// finalize without a required attribute; tensors of one data type, packed NCHW (other strides
// are not modeled), with a power-of-two byte alignment; an operation whose Y is the shape the
// convolution gives and whose filter's channels are the input's over the groups; a variant pack
// that misses one of the graph's tensors, or an address below the alignment its tensor was
// declared with. It is stricter in one way: an operand or workspace past its device allocation
// is an error.
//
// Its engines are the stand-in's own rule: mode A ranks engine 0 (tensor cores: TF32 for f32
// data, which it models by reading x and w in TF32), engine 1 (no notes) and engine 2 (compiles
// at run time); a depthwise convolution gets engines 2 and 0 only, so that f32 finds no engine
// without tensor cores or run-time compilation; the fallback mode offers engine 2. Workspaces:
// engine 0 256 bytes an image, engine 1 the filter's size in bytes plus 128 an image, engine 2
// none.
#include "cudnn_conv.h"

#include <cstdint>
#include <map>

using namespace lb_dnn;

namespace {

// cudnnBackendAttributeType_t
enum { T_HANDLE = 0, T_DATA_TYPE = 1, T_BOOLEAN = 2, T_INT64 = 3, T_FLOAT = 4, T_DOUBLE = 5, T_VOID_PTR = 6,
       T_CONV_MODE = 7, T_HEUR_MODE = 8, T_NUMERICAL_NOTE = 11, T_BACKEND_DESCRIPTOR = 15, T_BEHAVIOR_NOTE = 19 };
// cudnnBackendDescriptorType_t
enum { K_CONV = 1, K_ENGINE = 2, K_ENGINECFG = 3, K_ENGINEHEUR = 4, K_PLAN = 5, K_OP_CONV_FWD = 10,
       K_OPGRAPH = 15, K_VARIANT_PACK = 16, K_TENSOR = 17 };
// cudnnBackendAttributeName_t
enum {
    CONV_COMP_TYPE = 100, CONV_MODE = 101, CONV_DILATIONS = 102, CONV_FILTER_STRIDES = 103, CONV_POST_PADDINGS = 104,
    CONV_PRE_PADDINGS = 105, CONV_SPATIAL_DIMS = 106,
    HEUR_MODE = 200, HEUR_OPERATION_GRAPH = 201, HEUR_RESULTS = 202,
    CFG_ENGINE = 300,
    PLAN_HANDLE = 400, PLAN_ENGINE_CONFIG = 401, PLAN_WORKSPACE_SIZE = 402,
    OP_ALPHA = 700, OP_BETA = 701, OP_CONV_DESC = 702, OP_W = 703, OP_X = 704, OP_Y = 705,
    GRAPH_HANDLE = 800, GRAPH_OPS = 801,
    TENSOR_BYTE_ALIGNMENT = 900, TENSOR_DATA_TYPE = 901, TENSOR_DIMENSIONS = 902, TENSOR_STRIDES = 903,
    TENSOR_UNIQUE_ID = 906,
    VP_UNIQUE_IDS = 1000, VP_DATA_POINTERS = 1001, VP_WORKSPACE = 1003,
    ENGINE_GLOBAL_INDEX = 1301, ENGINE_NUMERICAL_NOTE = 1303, ENGINE_BEHAVIOR_NOTE = 1305,
};
enum { HEUR_INSTANT = 0, HEUR_B = 1, HEUR_FALLBACK = 2, HEUR_A = 3 };
enum { NOTE_TENSOR_CORE = 0, BEHAVIOR_RUNTIME_COMPILATION = 0 };

const unsigned BACKEND = 0x6c624231;

size_t type_size(int t) {
    switch (t) {
        case T_BOOLEAN: return 1;
        case T_DATA_TYPE: case T_FLOAT: case T_CONV_MODE: case T_HEUR_MODE: case T_NUMERICAL_NOTE:
        case T_BEHAVIOR_NOTE: return 4;
        case T_HANDLE: case T_INT64: case T_DOUBLE: case T_VOID_PTR: case T_BACKEND_DESCRIPTOR: return 8;
        default: return 0;
    }
}

struct Attr {
    int type = 0;
    std::vector<unsigned char> bytes;
    int64_t count() const { return (int64_t)(bytes.size() / type_size(type)); }
    template <typename V>
    V at(int64_t i) const {
        V v;
        std::memcpy(&v, bytes.data() + i * sizeof(V), sizeof(V));
        return v;
    }
};

struct Desc {
    unsigned tag = BACKEND;
    int kind = 0;
    bool final = false;
    std::map<int, Attr> attrs;
    int engine = -1;        // an engine or engine configuration: the stand-in's engine
    Desc* graph = nullptr;  // an engine configuration: the graph it was ranked for
    size_t workspace = 0;   // an execution plan
};

bool live(const Desc* d, int kind) { return d && d->tag == BACKEND && d->kind == kind; }

// The attributes each kind takes, and their types.
int attr_type(int kind, int name) {
    switch (kind) {
        case K_TENSOR:
            switch (name) {
                case TENSOR_DATA_TYPE: return T_DATA_TYPE;
                case TENSOR_DIMENSIONS: case TENSOR_STRIDES: case TENSOR_UNIQUE_ID: case TENSOR_BYTE_ALIGNMENT:
                    return T_INT64;
            }
            break;
        case K_CONV:
            switch (name) {
                case CONV_COMP_TYPE: return T_DATA_TYPE;
                case CONV_MODE: return T_CONV_MODE;
                case CONV_DILATIONS: case CONV_FILTER_STRIDES: case CONV_POST_PADDINGS: case CONV_PRE_PADDINGS:
                case CONV_SPATIAL_DIMS: return T_INT64;
            }
            break;
        case K_OP_CONV_FWD:
            switch (name) {
                case OP_ALPHA: case OP_BETA: return T_FLOAT;
                case OP_CONV_DESC: case OP_W: case OP_X: case OP_Y: return T_BACKEND_DESCRIPTOR;
            }
            break;
        case K_OPGRAPH:
            if (name == GRAPH_HANDLE) return T_HANDLE;
            if (name == GRAPH_OPS) return T_BACKEND_DESCRIPTOR;
            break;
        case K_ENGINEHEUR:
            if (name == HEUR_MODE) return T_HEUR_MODE;
            if (name == HEUR_OPERATION_GRAPH) return T_BACKEND_DESCRIPTOR;
            break;
        case K_PLAN:
            if (name == PLAN_HANDLE) return T_HANDLE;
            if (name == PLAN_ENGINE_CONFIG) return T_BACKEND_DESCRIPTOR;
            break;
        case K_VARIANT_PACK:
            if (name == VP_UNIQUE_IDS) return T_INT64;
            if (name == VP_DATA_POINTERS || name == VP_WORKSPACE) return T_VOID_PTR;
            break;
    }
    return -1;
}

// An attribute a finalized descriptor must hold, of `count` elements (or at least one: -1).
bool has(const Desc* d, int name, int64_t count) {
    auto it = d->attrs.find(name);
    return it != d->attrs.end() && (count < 0 ? it->second.count() > 0 : it->second.count() == count);
}
template <typename V>
V one(const Desc* d, int name) {
    return d->attrs.at(name).at<V>(0);
}

// A finalized tensor's host form (legacy struct) and its id and alignment.
struct TensorInfo {
    int dtype;
    int64_t dims[4], uid, align;
};
TensorInfo tensor_info(const Desc* t) {
    TensorInfo i{one<int>(t, TENSOR_DATA_TYPE), {}, one<int64_t>(t, TENSOR_UNIQUE_ID),
                 one<int64_t>(t, TENSOR_BYTE_ALIGNMENT)};
    for (int k = 0; k < 4; ++k) i.dims[k] = t->attrs.at(TENSOR_DIMENSIONS).at<int64_t>(k);
    return i;
}

// The forward convolution an operation graph holds: x, w, y and the convolution as the legacy
// structs Job computes with.
struct ConvOp {
    TensorInfo x, w, y;
    Conv c;
};
ConvOp conv_of(const Desc* graph) {
    const Desc* op = one<Desc*>(graph, GRAPH_OPS);
    const Desc* cd = one<Desc*>(op, OP_CONV_DESC);
    ConvOp o{tensor_info(one<Desc*>(op, OP_X)), tensor_info(one<Desc*>(op, OP_W)), tensor_info(one<Desc*>(op, OP_Y)), {}};
    auto i64 = [&](int name, int k) { return (int)cd->attrs.at(name).at<int64_t>(k); };
    o.c = Conv{CONV, true, i64(CONV_PRE_PADDINGS, 0), i64(CONV_PRE_PADDINGS, 1), i64(CONV_FILTER_STRIDES, 0),
               i64(CONV_FILTER_STRIDES, 1), i64(CONV_DILATIONS, 0), i64(CONV_DILATIONS, 1), DATA_FLOAT,
               (int)(o.x.dims[1] / o.w.dims[1]), MATH_FMA};
    return o;
}

bool depthwise(const ConvOp& o) { return o.w.dims[1] == 1 && o.c.groups == o.x.dims[1] && o.c.groups > 1; }

// The stand-in's engines: notes and workspace (see the file's header).
bool tensor_cores(int engine) { return engine == 0; }
bool compiles(int engine) { return engine == 2; }
size_t engine_workspace(int engine, const ConvOp& o) {
    size_t n = (size_t)o.x.dims[0];
    switch (engine) {
        case 0: return 256 * n;
        case 1: return (size_t)(o.w.dims[0] * o.w.dims[1] * o.w.dims[2] * o.w.dims[3]) * elem(o.w.dtype) + 128 * n;
        default: return 0;
    }
}
std::vector<int> ranked(int mode, const ConvOp& o) {
    if (mode == HEUR_FALLBACK) return {2};
    if (depthwise(o)) return {2, 0};
    return {0, 1, 2};
}

cudnnStatus_t finalize_tensor(Desc* d) {
    const char* f = "cudnnBackendFinalize(TENSOR)";
    if (!has(d, TENSOR_DATA_TYPE, 1) || !has(d, TENSOR_DIMENSIONS, 4) || !has(d, TENSOR_STRIDES, 4) ||
        !has(d, TENSOR_UNIQUE_ID, 1) || !has(d, TENSOR_BYTE_ALIGNMENT, 1))
        return refuse(BAD_PARAM, f, "a required attribute missing (4-D dimensions and strides modeled)");
    TensorInfo t = tensor_info(d);
    if (t.dtype != DATA_FLOAT && t.dtype != DATA_HALF) return refuse(NOT_SUPPORTED, f, "a data type not modeled");
    int64_t want = 1;
    for (int k = 3; k >= 0; --k) {
        if (t.dims[k] <= 0) return refuse(BAD_PARAM, f, "a dimension below 1");
        if (d->attrs.at(TENSOR_STRIDES).at<int64_t>(k) != want)
            return refuse(NOT_SUPPORTED, f, "strides other than packed NCHW (not modeled)");
        want *= t.dims[k];
    }
    if (t.align < (int64_t)elem(t.dtype) || (t.align & (t.align - 1)))
        return refuse(BAD_PARAM, f, "a byte alignment that is not a power of two of at least one element");
    return SUCCESS;
}

cudnnStatus_t finalize_op(Desc* d) {
    const char* f = "cudnnBackendFinalize(OPERATION_CONVOLUTION_FORWARD)";
    for (int a : {OP_X, OP_W, OP_Y, OP_CONV_DESC, OP_ALPHA, OP_BETA})
        if (!has(d, a, 1)) return refuse(BAD_PARAM, f, "a required attribute missing");
    Desc* parts[4] = {one<Desc*>(d, OP_X), one<Desc*>(d, OP_W), one<Desc*>(d, OP_Y), one<Desc*>(d, OP_CONV_DESC)};
    for (int k = 0; k < 3; ++k)
        if (!live(parts[k], K_TENSOR) || !parts[k]->final) return refuse(BAD_PARAM, f, "X, W or Y not a finalized tensor");
    if (!live(parts[3], K_CONV) || !parts[3]->final) return refuse(BAD_PARAM, f, "not a finalized convolution");
    TensorInfo x = tensor_info(parts[0]), w = tensor_info(parts[1]), y = tensor_info(parts[2]);
    if (x.dtype != w.dtype || x.dtype != y.dtype) return refuse(BAD_PARAM, f, "X, W and Y of different data types");
    if (x.uid == w.uid || x.uid == y.uid || w.uid == y.uid) return refuse(BAD_PARAM, f, "tensors sharing a unique id");
    if (x.dims[1] % w.dims[1] || w.dims[0] % (x.dims[1] / w.dims[1]))
        return refuse(BAD_PARAM, f, "the filter's channels are not the input's over the groups");
    Tensor xt{TENSOR, true, x.dtype, (int)x.dims[0], (int)x.dims[1], (int)x.dims[2], (int)x.dims[3]};
    Filter wt{FILTER, true, w.dtype, (int)w.dims[0], (int)w.dims[1], (int)w.dims[2], (int)w.dims[3]};
    const Desc* cd = parts[3];
    auto i64 = [&](int name, int k) { return (int)cd->attrs.at(name).at<int64_t>(k); };
    Conv c{CONV, true, i64(CONV_PRE_PADDINGS, 0), i64(CONV_PRE_PADDINGS, 1), i64(CONV_FILTER_STRIDES, 0),
           i64(CONV_FILTER_STRIDES, 1), i64(CONV_DILATIONS, 0), i64(CONV_DILATIONS, 1), DATA_FLOAT, 1, MATH_FMA};
    int dims[4];
    out_dims(xt, wt, c, dims);
    for (int k = 0; k < 4; ++k)
        if (dims[k] != y.dims[k]) return refuse(BAD_PARAM_SHAPE_MISMATCH, f, "Y is not the shape the convolution gives");
    return SUCCESS;
}

cudnnStatus_t finalize(Desc* d) {
    const char* f = "cudnnBackendFinalize";
    switch (d->kind) {
        case K_TENSOR: return finalize_tensor(d);
        case K_CONV:
            if (!has(d, CONV_SPATIAL_DIMS, 1) || one<int64_t>(d, CONV_SPATIAL_DIMS) != 2 || !has(d, CONV_COMP_TYPE, 1) ||
                !has(d, CONV_MODE, 1) || !has(d, CONV_DILATIONS, 2) || !has(d, CONV_FILTER_STRIDES, 2) ||
                !has(d, CONV_PRE_PADDINGS, 2) || !has(d, CONV_POST_PADDINGS, 2))
                return refuse(BAD_PARAM, f, "a 2-D convolution's required attribute missing");
            if (one<int>(d, CONV_MODE) != CROSS_CORRELATION || one<int>(d, CONV_COMP_TYPE) != DATA_FLOAT)
                return refuse(NOT_SUPPORTED, f, "a true convolution or a compute type other than f32 (not modeled)");
            for (int k = 0; k < 2; ++k)
                if (d->attrs.at(CONV_PRE_PADDINGS).at<int64_t>(k) != d->attrs.at(CONV_POST_PADDINGS).at<int64_t>(k))
                    return refuse(NOT_SUPPORTED, f, "asymmetric padding (not modeled)");
            return SUCCESS;
        case K_OP_CONV_FWD: return finalize_op(d);
        case K_OPGRAPH: {
            if (!has(d, GRAPH_HANDLE, 1) || !has(d, GRAPH_OPS, 1))
                return refuse(BAD_PARAM, f, "an operation graph of one operation and a handle (what is modeled)");
            Desc* op = one<Desc*>(d, GRAPH_OPS);
            if (!live(op, K_OP_CONV_FWD) || !op->final) return refuse(BAD_PARAM, f, "not a finalized convolution");
            Handle* h = one<Handle*>(d, GRAPH_HANDLE);
            if (!h || h->tag != HANDLE) return refuse(BAD_PARAM, f, "not a cuDNN handle");
            return SUCCESS;
        }
        case K_ENGINEHEUR: {
            if (!has(d, HEUR_OPERATION_GRAPH, 1) || !has(d, HEUR_MODE, 1)) return refuse(BAD_PARAM, f, "graph or mode missing");
            Desc* g = one<Desc*>(d, HEUR_OPERATION_GRAPH);
            if (!live(g, K_OPGRAPH) || !g->final) return refuse(BAD_PARAM, f, "not a finalized operation graph");
            int m = one<int>(d, HEUR_MODE);
            if (m != HEUR_A && m != HEUR_FALLBACK && m != HEUR_B && m != HEUR_INSTANT)
                return refuse(BAD_PARAM, f, "an unknown heuristic mode");
            return SUCCESS;
        }
        case K_PLAN: {
            if (!has(d, PLAN_HANDLE, 1) || !has(d, PLAN_ENGINE_CONFIG, 1)) return refuse(BAD_PARAM, f, "handle or config missing");
            Desc* cfg = one<Desc*>(d, PLAN_ENGINE_CONFIG);
            if (!live(cfg, K_ENGINECFG) || !cfg->final || cfg->engine < 0)
                return refuse(BAD_PARAM, f, "not an engine configuration the heuristics returned");
            d->engine = cfg->engine;
            d->graph = cfg->graph;
            d->workspace = engine_workspace(cfg->engine, conv_of(cfg->graph));
            return SUCCESS;
        }
        case K_VARIANT_PACK:
            if (!has(d, VP_UNIQUE_IDS, -1) || !has(d, VP_DATA_POINTERS, -1) || !has(d, VP_WORKSPACE, 1) ||
                d->attrs.at(VP_UNIQUE_IDS).count() != d->attrs.at(VP_DATA_POINTERS).count())
                return refuse(BAD_PARAM, f, "ids, as many pointers, and a workspace (null when none) required");
            return SUCCESS;
        default:
            return refuse(NOT_SUPPORTED, f, "a descriptor kind not modeled");
    }
}

}  // namespace

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(int kind, Desc** d) {
    if (!d) return BAD_PARAM_NULL_POINTER;
    switch (kind) {
        case K_CONV: case K_ENGINE: case K_ENGINECFG: case K_ENGINEHEUR: case K_PLAN: case K_OP_CONV_FWD:
        case K_OPGRAPH: case K_VARIANT_PACK: case K_TENSOR: break;
        default: return refuse(NOT_SUPPORTED, "cudnnBackendCreateDescriptor", "a descriptor kind not modeled");
    }
    *d = new Desc();
    (*d)->kind = kind;
    return SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(Desc* d) {
    if (!d || d->tag != BACKEND) return BAD_PARAM;
    d->tag = 0;
    delete d;
    return SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(Desc* d, int name, int type, int64_t count, const void* values) {
    const char* f = "cudnnBackendSetAttribute";
    if (!d || d->tag != BACKEND) return refuse(BAD_PARAM, f, "not a backend descriptor");
    if (d->final) return refuse(BAD_PARAM, f, "an attribute set after finalizing");
    int want = attr_type(d->kind, name);
    if (want < 0) return refuse(BAD_PARAM, f, "an attribute its descriptor kind does not have");
    if (type != want) return refuse(BAD_PARAM, f, "an attribute of another type");
    if (count < 0 || (count > 0 && !values)) return refuse(BAD_PARAM, f, "no values");
    Attr a;
    a.type = type;
    a.bytes.resize((size_t)count * type_size(type));
    if (count) std::memcpy(a.bytes.data(), values, a.bytes.size());
    d->attrs[name] = a;
    return SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(Desc* d) {
    if (!d || d->tag != BACKEND) return refuse(BAD_PARAM, "cudnnBackendFinalize", "not a backend descriptor");
    if (d->final) return refuse(BAD_PARAM, "cudnnBackendFinalize", "finalized twice");
    cudnnStatus_t s = finalize(d);
    if (s == SUCCESS) d->final = true;
    return s;
}

cudnnStatus_t cudnnBackendGetAttribute(Desc* d, int name, int type, int64_t requested, int64_t* count, void* out) {
    const char* f = "cudnnBackendGetAttribute";
    if (!d || d->tag != BACKEND || !d->final) return refuse(BAD_PARAM, f, "not a finalized backend descriptor");
    if (!count) return refuse(BAD_PARAM_NULL_POINTER, f, "no count");
    auto put = [&](const std::vector<uint32_t>& v) -> cudnnStatus_t {
        *count = (int64_t)v.size();
        for (int64_t i = 0; i < requested && i < (int64_t)v.size(); ++i) static_cast<uint32_t*>(out)[i] = v[i];
        return SUCCESS;
    };
    if (d->kind == K_ENGINEHEUR && name == HEUR_RESULTS && type == T_BACKEND_DESCRIPTOR) {
        Desc* graph = one<Desc*>(d, HEUR_OPERATION_GRAPH);
        std::vector<int> engines = ranked(one<int>(d, HEUR_MODE), conv_of(graph));
        *count = (int64_t)engines.size();
        for (int64_t i = 0; i < requested && i < (int64_t)engines.size(); ++i) {
            Desc* cfg = static_cast<Desc**>(out)[i];
            if (!live(cfg, K_ENGINECFG)) return refuse(BAD_PARAM, f, "results into a descriptor that is not an engine configuration");
            cfg->engine = engines[i];
            cfg->graph = graph;
            cfg->final = true;
        }
        return SUCCESS;
    }
    if (d->kind == K_ENGINECFG && name == CFG_ENGINE && type == T_BACKEND_DESCRIPTOR && requested >= 1) {
        Desc* e = static_cast<Desc**>(out)[0];
        if (!live(e, K_ENGINE)) return refuse(BAD_PARAM, f, "the engine into a descriptor that is not an engine");
        e->engine = d->engine;
        e->graph = d->graph;
        e->final = true;
        *count = 1;
        return SUCCESS;
    }
    if (d->kind == K_ENGINE && name == ENGINE_NUMERICAL_NOTE && type == T_NUMERICAL_NOTE)
        return put(tensor_cores(d->engine) ? std::vector<uint32_t>{NOTE_TENSOR_CORE} : std::vector<uint32_t>{});
    if (d->kind == K_ENGINE && name == ENGINE_BEHAVIOR_NOTE && type == T_BEHAVIOR_NOTE)
        return put(compiles(d->engine) ? std::vector<uint32_t>{BEHAVIOR_RUNTIME_COMPILATION} : std::vector<uint32_t>{});
    if (d->kind == K_ENGINE && name == ENGINE_GLOBAL_INDEX && type == T_INT64 && requested >= 1) {
        *static_cast<int64_t*>(out) = d->engine;
        *count = 1;
        return SUCCESS;
    }
    if (d->kind == K_PLAN && name == PLAN_WORKSPACE_SIZE && type == T_INT64 && requested >= 1) {
        *static_cast<int64_t*>(out) = (int64_t)d->workspace;
        *count = 1;
        return SUCCESS;
    }
    return refuse(NOT_SUPPORTED, f, "an attribute read not modeled");
}

cudnnStatus_t cudnnBackendExecute(Handle* h, Desc* plan, Desc* vp) {
    const char* f = "cudnnBackendExecute";
    g_calls += 1;
    if (!h || h->tag != HANDLE) return refuse(BAD_PARAM, f, "not a cuDNN handle");
    if (!live(plan, K_PLAN) || !plan->final) return refuse(BAD_PARAM, f, "not a finalized execution plan");
    if (!live(vp, K_VARIANT_PACK) || !vp->final) return refuse(BAD_PARAM, f, "not a finalized variant pack");
    ConvOp o = conv_of(plan->graph);
    const Attr& ids = vp->attrs.at(VP_UNIQUE_IDS);
    const Attr& ptrs = vp->attrs.at(VP_DATA_POINTERS);
    void* ws = one<void*>(vp, VP_WORKSPACE);
    const TensorInfo* ts[3] = {&o.x, &o.w, &o.y};
    void* at[3] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < 3; ++k) {
        for (int64_t i = 0; i < ids.count(); ++i)
            if (ids.at<int64_t>(i) == ts[k]->uid) at[k] = ptrs.at<void*>(i);
        if (!at[k]) return refuse(BAD_PARAM, f, "a tensor of the graph missing from the variant pack");
        if (!aligned(at[k], (size_t)ts[k]->align))
            return refuse(BAD_PARAM_MISALIGNED_POINTER, f, "an address below the alignment its tensor declared");
        size_t bytes = (size_t)(ts[k]->dims[0] * ts[k]->dims[1] * ts[k]->dims[2] * ts[k]->dims[3]) * elem(ts[k]->dtype);
        if (!lb_link::inside(at[k], bytes)) {
            std::fprintf(stderr, "cudnn-stand-in: %s: %c extends past its device allocation\n", f, "XWY"[k]);
            return BAD_PARAM;
        }
    }
    if (plan->workspace && (!ws || !lb_link::inside(ws, plan->workspace)))
        return refuse(BAD_PARAM, f, "a workspace smaller than the plan's");
    Job job{};
    job.x = Tensor{TENSOR, true, o.x.dtype, (int)o.x.dims[0], (int)o.x.dims[1], (int)o.x.dims[2], (int)o.x.dims[3]};
    job.w = Filter{FILTER, true, o.w.dtype, (int)o.w.dims[0], (int)o.w.dims[1], (int)o.w.dims[2], (int)o.w.dims[3]};
    job.y = Tensor{TENSOR, true, o.y.dtype, (int)o.y.dims[0], (int)o.y.dims[1], (int)o.y.dims[2], (int)o.y.dims[3]};
    job.c = o.c;
    job.c.math = tensor_cores(plan->engine) ? MATH_TENSOR_OP : MATH_FMA;
    job.xp = at[0], job.wp = at[1], job.yp = at[2], job.zp = nullptr, job.bp = nullptr;
    const Desc* op = one<Desc*>(plan->graph, GRAPH_OPS);
    job.alpha1 = one<float>(op, OP_ALPHA), job.alpha2 = one<float>(op, OP_BETA), job.act = -1;
    lb_link::now_or_recorded(job);
    return SUCCESS;
}

}  // extern "C"
