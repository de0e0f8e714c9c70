// Convolution as a tiled implicit GEMM: out[co, n] = sum_k W[co, k] * X[k, n] for each group, where n runs over
// batch * OH * OW and X (im2col) is read straight from the NCHW input, never materialised.
//
// A workgroup computes a BM x BN tile of out; each of its threads a TM x TN block held in registers. K advances BK
// at a time through shared memory: the weights come pre-packed K-major and zero padded ([group][kpad][mpad]), so
// their tile loads are aligned vec4s with no bounds checks; the im2col tile is gathered one value per thread and
// column, each thread keeping one output position (decoded once) and looking each k up in a table of tap offsets
// (no division in the loop). The next K step is fetched into registers while the current one is multiplied.
// A thread's rows and columns are spread as vec4 groups BM/MV (BN/NV) apart, so a warp's shared-memory reads are
// consecutive 16-byte words (no bank conflicts) and its stores coalesce.
//
// With PARTIAL, a workgroup sums only its K slice (the split) and writes raw partial sums; a second pass
// (conv_direct.wgsl's `reduce`) adds the slices in order, so the result does not depend on scheduling.
//
// This is a template (facerun/gpu/kernels.py `specialise`): ${...} are filled in per tile and variant, and
// #unroll blocks are written out, so the register block lives in named registers rather than indexed arrays.

const BM: u32 = ${BM}u;
const BN: u32 = ${BN}u;
const BK: u32 = ${BK}u;
const TX: u32 = ${TX}u;  // threads along N
const TY: u32 = ${TY}u;  // threads along M
const WG: u32 = ${WG}u;
const A_VEC: u32 = ${A_VEC}u;  // vec4s in a weight tile
const B_ROWS: u32 = ${B_ROWS}u;  // im2col rows gathered per pass (WG is a multiple of BN)

struct Params {
#fields epilogue
    m: u32,  // output channels per group
    n: u32,  // batch * oh * ow
    k: u32,  // cg * kh * kw
    kpad: u32,
    mpad4: u32,  // packed weight row length, in vec4s
    cin: u32,
    cg: u32,
    cout: u32,
    h: u32,
    w: u32,
    ohw: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    dh: u32,
    dw: u32,
    pt: u32,
    pl: u32,
    k_chunk: u32,
    splits: u32,
    tiles_m: u32,
    tiles_n: u32,
    count: u32,  // workgroups in all
    row: u32,  // workgroups per grid row
    total: u32,  // output values (the stride between partial-sum slices)
    out_b: u32,  // output element strides of batch, channel and position: NCHW (cout * ohw, ohw, 1), or NHWC
    out_c: u32,  // (ohw * cout, 1, cout) when a transpose was fused into the convolution
    out_p: u32,
}

// POOLED (a 1x1): x is a 2x2 max pool's input of h x w (lower.pooled_inputs), each value read the largest of its
// window at (2 oy, 2 ox), so the pool's output is never written.
// HALF: input and weights stored as f16 (Winograd's planes at --precision f16), widened as they are read; the tiles
// in shared memory and the sums stay f32, so each product is exact and only the storage is rounded
alias stored = ${"f16" if HALF else "f32"};
// HALF_OUT: the sums written as f16 (Winograd's products at --precision f16, never split)
alias out_t = ${"f16" if HALF_OUT else "f32"};
// taps, per k of a group: (its input channel, its row offset ky * dh, its column offset kx * dw, 0), so the gather
// needs no division; the table does not depend on the input size (unused when POINTWISE)
#bindings x: stored, wt: vec4<stored>, epi, res, taps: vec4<i32> -> out_t

var<workgroup> tile_a: array<vec4<f32>, ${BK * BM // 4}>;
var<workgroup> tile_b: array<vec4<f32>, ${BK * BN // 4}>;

// One output position's im2col column: where its input window starts.
struct Column {
    ok: bool,
    base: u32,  // input offset of (batch, first channel of the group) [+ the position itself when POINTWISE]
    iy0: i32,
    ix0: i32,
}

fn im2col(k: u32, kend: u32, c: Column) -> f32 {
    if (!c.ok || k >= kend) {
        return 0.0;
    }
#if POINTWISE and not POOLED
    return f32(x[c.base + k * p.h * p.w]);
#end
#if POOLED
    let at = c.base + k * p.h * p.w;
    return f32(max(max(x[at], x[at + 1u]), max(x[at + p.w], x[at + p.w + 1u])));
#end
#if not POINTWISE
    let t = taps[k];
    let iy = c.iy0 + t.y;
    let ix = c.ix0 + t.z;
    if (iy < 0 || ix < 0 || iy >= i32(p.h) || ix >= i32(p.w)) {
        return 0.0;
    }
    return f32(x[c.base + (u32(t.x) * p.h + u32(iy)) * p.w + u32(ix)]);
#end
}

fn weights(at: u32, e: u32) -> vec4<f32> {
    return vec4<f32>(wt[at + (e / (BM / 4u)) * p.mpad4 + e % (BM / 4u)]);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let lin = wid.y * p.row + wid.x;
    if (lin >= p.count) {
        return;
    }
    // output channel tiles vary fastest: neighbouring workgroups share their im2col tile through the cache
    let tile_m = lin % p.tiles_m;
    var rest = lin / p.tiles_m;
    let tile_n = rest % p.tiles_n;
    rest = rest / p.tiles_n;
    let split = rest % p.splits;
    let g = rest / p.splits;
    let m0 = tile_m * BM;
    let n0 = tile_n * BN;
    let kbeg = split * p.k_chunk;
    let kend = min(kbeg + p.k_chunk, p.k);
    let kstop = min(kbeg + p.k_chunk, p.kpad);

    // this thread's im2col column (fixed for the whole K loop)
    let bcol = tid % BN;
    let brow = tid / BN;
    let ncol = n0 + bcol;
    var col: Column;
    col.ok = ncol < p.n;
    let nb = ncol / p.ohw;
    let sp = ncol - nb * p.ohw;
    let oy = sp / p.ow;
    let ox = sp - oy * p.ow;
    col.base = (nb * p.cin + g * p.cg) * p.h * p.w;
#if POINTWISE and not POOLED
    col.base += sp;
#end
#if POOLED
    col.base += 2u * (oy * p.w + ox);
#end
    col.iy0 = i32(oy * p.sh) - i32(p.pt);
    col.ix0 = i32(ox * p.sw) - i32(p.pl);
    let a_base = g * p.kpad * p.mpad4 + m0 / 4u;
    let b_at = brow * BN + bcol;  // where this thread's first im2col value goes in tile_b (as floats)

    let tx = tid % TX;
    let ty = tid / TX;
#unroll i 0 TM
#unroll j 0 NV
    var acc_${i}_${j} = vec4<f32>(0.0);
#end
#end

    // fetch the first K step
    var k0 = kbeg;
#unroll r 0 A_LOADS
#if (r + 1) * WG <= A_VEC
    var next_a_${r} = weights(a_base + k0 * p.mpad4, tid + ${r * WG}u);
#end
#if (r + 1) * WG > A_VEC
    var next_a_${r} = vec4<f32>(0.0);
    if (tid + ${r * WG}u < A_VEC) {
        next_a_${r} = weights(a_base + k0 * p.mpad4, tid + ${r * WG}u);
    }
#end
#end
#unroll r 0 B_LOADS
    var next_b_${r} = im2col(k0 + brow + ${r * B_ROWS}u, kend, col);
#end

    loop {
        if (k0 >= kstop) {
            break;
        }
#unroll r 0 A_LOADS
#if (r + 1) * WG <= A_VEC
        tile_a[tid + ${r * WG}u] = next_a_${r};
#end
#if (r + 1) * WG > A_VEC
        if (tid + ${r * WG}u < A_VEC) {
            tile_a[tid + ${r * WG}u] = next_a_${r};
        }
#end
#end
#unroll r 0 B_LOADS
        tile_b[(b_at + ${r * B_ROWS * BN}u) / 4u][bcol % 4u] = next_b_${r};
#end
        workgroupBarrier();
        // fetch the next K step while this one is multiplied
        let kn = k0 + BK;
        if (kn < kstop) {
#unroll r 0 A_LOADS
#if (r + 1) * WG <= A_VEC
            next_a_${r} = weights(a_base + kn * p.mpad4, tid + ${r * WG}u);
#end
#if (r + 1) * WG > A_VEC
            if (tid + ${r * WG}u < A_VEC) {
                next_a_${r} = weights(a_base + kn * p.mpad4, tid + ${r * WG}u);
            }
#end
#end
#unroll r 0 B_LOADS
            next_b_${r} = im2col(kn + brow + ${r * B_ROWS}u, kend, col);
#end
        }
        for (var kq = 0u; kq < BK; kq += ${KU}u) {
#unroll u 0 KU
            {
                let kk = kq + ${u}u;
#unroll i 0 MV
                let a${i} = tile_a[kk * ${BM // 4}u + ${i * TY}u + ty];
#end
#unroll j 0 NV
                let b${j} = tile_b[kk * ${BN // 4}u + ${j * TX}u + tx];
#end
#unroll i 0 MV
#unroll c 0 4
#unroll j 0 NV
                acc_${i * 4 + c}_${j} = fma(vec4<f32>(a${i}[${c}]), b${j}, acc_${i * 4 + c}_${j});
#end
#end
#end
            }
#end
        }
        workgroupBarrier();
        k0 = kn;
    }

    // epilogue: scatter the block to NCHW, or NHWC (n = batch * ohw + position)
#unroll j 0 NV
#unroll c 0 4
    {
        let n = n0 + (${j * TX}u + tx) * 4u + ${c}u;
        if (n < p.n) {
            let b = n / p.ohw;
            let base = b * p.out_b + (n - b * p.ohw) * p.out_p;
#unroll i 0 MV
#unroll r 0 4
            {
                let ml = m0 + (${i * TY}u + ty) * 4u + ${r}u;
                if (ml < p.m) {
                    let co = g * p.m + ml;
                    let at = base + co * p.out_c;
#if PARTIAL
                    out[split * p.total + at] = out_t(acc_${i * 4 + r}_${j}[${c}]);
#end
#if not PARTIAL
                    out[at] = out_t(finish(acc_${i * 4 + r}_${j}[${c}], co, at));
#end
                }
            }
#end
#end
        }
    }
#end
#end
}
