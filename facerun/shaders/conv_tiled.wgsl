// Convolution as a tiled implicit GEMM: out[co, n] = sum_k W[co, k] * X[k, n] for each group, where n runs over
// batch * OH * OW and X (im2col) is read straight from the NCHW input, never materialised.
//
// A workgroup computes a BM x BN tile of out; each of its threads a TM x TN block held in registers. K advances BK
// at a time through shared memory: the weights come pre-packed K-major and zero padded ([group][kpad][mpad]), so
// their tile loads are aligned vec4s with no bounds checks; the im2col tile is gathered one value per thread and
// column, each thread keeping one output position (its decode done once). The next K step is fetched into registers
// while the current one is multiplied. A thread's rows and columns are spread as vec4 groups BM/MV (BN/NV) apart,
// so a warp's shared-memory reads are consecutive 16-byte words (no bank conflicts) and its stores coalesce.
//
// With PARTIAL, a workgroup sums only its K slice (the split) and writes raw partial sums; a second pass
// (conv_direct.wgsl's `reduce`) adds the slices in order, so the result does not depend on scheduling.
//
// The host (facerun/gpu/kernels.py) fills in the constants below for each tile and variant.

const BM: u32 = ${BM}u;
const BN: u32 = ${BN}u;
const BK: u32 = ${BK}u;
const TM: u32 = ${TM}u;
const TN: u32 = ${TN}u;
const POINTWISE: bool = ${POINTWISE};  // 1x1, stride 1, no padding: X is the input itself
const PARTIAL: bool = ${PARTIAL};

const TX: u32 = BN / TN;  // threads along N
const TY: u32 = BM / TM;  // threads along M
const WG: u32 = TX * TY;
const MV: u32 = TM / 4u;  // vec4 row groups per thread
const NV: u32 = TN / 4u;  // vec4 column groups per thread
const A_VEC: u32 = BK * BM / 4u;  // vec4s in a weight tile
const A_LOADS: u32 = (A_VEC + WG - 1u) / WG;
const B_ROWS: u32 = WG / BN;  // im2col rows gathered per pass (WG is a multiple of BN)
const B_LOADS: u32 = BK / B_ROWS;

struct Params {
    has_bias: u32,
    has_res: u32,
    act: u32,
    lo: f32,
    hi: f32,
    alpha: f32,
    slope_at: u32,
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
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> wt: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> epi: array<f32>;
@group(0) @binding(4) var<storage, read> res: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<workgroup> tile_a: array<vec4<f32>, A_VEC>;
var<workgroup> tile_b: array<vec4<f32>, BK * BN / 4u>;

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
    let hw = p.h * p.w;
    if (POINTWISE) {
        return x[c.base + k * hw];
    }
    let khw = p.kh * p.kw;
    let ci = k / khw;
    let r = k - ci * khw;
    let ky = r / p.kw;
    let kx = r - ky * p.kw;
    let iy = c.iy0 + i32(ky * p.dh);
    let ix = c.ix0 + i32(kx * p.dw);
    if (iy < 0 || ix < 0 || iy >= i32(p.h) || ix >= i32(p.w)) {
        return 0.0;
    }
    return x[c.base + ci * hw + u32(iy) * p.w + u32(ix)];
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
    if (POINTWISE) {
        col.base += sp;
    }
    col.iy0 = i32(oy * p.sh) - i32(p.pt);
    col.ix0 = i32(ox * p.sw) - i32(p.pl);
    let a_base = g * p.kpad * p.mpad4 + m0 / 4u;

    let tx = tid % TX;
    let ty = tid / TX;
    var acc: array<array<vec4<f32>, NV>, TM>;
    var next_a: array<vec4<f32>, A_LOADS>;
    var next_b: array<f32, B_LOADS>;

    // fetch the first K step
    for (var r = 0u; r < A_LOADS; r++) {
        let e = tid + r * WG;
        if (e < A_VEC) {
            next_a[r] = wt[a_base + (kbeg + e / (BM / 4u)) * p.mpad4 + e % (BM / 4u)];
        }
    }
    for (var r = 0u; r < B_LOADS; r++) {
        next_b[r] = im2col(kbeg + brow + r * B_ROWS, kend, col);
    }

    for (var k0 = kbeg; k0 < kstop; k0 += BK) {
        for (var r = 0u; r < A_LOADS; r++) {
            let e = tid + r * WG;
            if (e < A_VEC) {
                tile_a[e] = next_a[r];
            }
        }
        for (var r = 0u; r < B_LOADS; r++) {
            let at = (brow + r * B_ROWS) * BN + bcol;
            tile_b[at / 4u][at % 4u] = next_b[r];
        }
        workgroupBarrier();
        // fetch the next K step while this one is multiplied
        let kn = k0 + BK;
        if (kn < kstop) {
            for (var r = 0u; r < A_LOADS; r++) {
                let e = tid + r * WG;
                if (e < A_VEC) {
                    next_a[r] = wt[a_base + (kn + e / (BM / 4u)) * p.mpad4 + e % (BM / 4u)];
                }
            }
            for (var r = 0u; r < B_LOADS; r++) {
                next_b[r] = im2col(kn + brow + r * B_ROWS, kend, col);
            }
        }
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<vec4<f32>, MV>;
            var b: array<vec4<f32>, NV>;
            for (var i = 0u; i < MV; i++) {
                a[i] = tile_a[kk * (BM / 4u) + i * TY + ty];
            }
            for (var j = 0u; j < NV; j++) {
                b[j] = tile_b[kk * (BN / 4u) + j * TX + tx];
            }
            for (var i = 0u; i < MV; i++) {
                for (var c = 0u; c < 4u; c++) {
                    let av = vec4<f32>(a[i][c]);
                    for (var j = 0u; j < NV; j++) {
                        acc[i * 4u + c][j] = fma(av, b[j], acc[i * 4u + c][j]);
                    }
                }
            }
        }
        workgroupBarrier();
    }

    // epilogue: scatter the block to NCHW (n = batch * ohw + position)
    for (var j = 0u; j < NV; j++) {
        for (var c = 0u; c < 4u; c++) {
            let n = n0 + (j * TX + tx) * 4u + c;
            if (n >= p.n) {
                continue;
            }
            let b = n / p.ohw;
            let base = b * p.cout * p.ohw + (n - b * p.ohw);
            for (var i = 0u; i < MV; i++) {
                for (var r = 0u; r < 4u; r++) {
                    let ml = m0 + (i * TY + ty) * 4u + r;
                    if (ml >= p.m) {
                        continue;
                    }
                    let co = g * p.m + ml;
                    let at = base + co * p.ohw;
                    let v = acc[i * 4u + r][j][c];
                    if (PARTIAL) {
                        out[split * p.total + at] = v;
                    } else {
                        out[at] = finish(v, co, at);
                    }
                }
            }
        }
    }
}
