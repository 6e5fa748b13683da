// LSTM cell update for a sub-batch: gates[b, 4H] (i, f, g, o) plus bias; the cell state lives
// in the member's slot of `cstate` (slot index per row), h is written to h_out[b, H]. reset[r]
// is 1 for a member at its first step (members of a cellular batch can be at different steps).
extern "C" __global__ void lstm_cell(const float* gates, const float* bias, float* cstate, const int* slots,
                                     const int* reset, float* h_out, int rows, int hdim) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * hdim) return;
    int r = (int)(i / hdim), j = (int)(i % hdim);
    const float* g = gates + (long long)r * 4 * hdim;
    float ig = lb_sigmoid(g[j] + bias[j]);
    float fg = lb_sigmoid(g[hdim + j] + bias[hdim + j]);
    float gg = tanhf(g[2 * hdim + j] + bias[2 * hdim + j]);
    float og = lb_sigmoid(g[3 * hdim + j] + bias[3 * hdim + j]);
    float* c = cstate + (long long)slots[r] * hdim + j;
    float cv = (reset[r] ? 0.0f : *c) * fg + ig * gg;
    *c = cv;
    h_out[i] = og * tanhf(cv);
}
