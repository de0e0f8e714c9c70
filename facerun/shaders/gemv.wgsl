// A fully connected layer with few rows: out (M, N) = act(x (M, K) @ W (N, K)^T + bias). Each workgroup makes one
// output feature for ROWS rows at once, so W (the large operand: 25088 x 512 in an IResNet head) is streamed from
// memory once per ROWS rows; its threads stride over K (vec4 loads when K % 4 == 0) and add up in shared memory, in
// a fixed order. A template (see conv_tiled.wgsl): the host fills in ROWS and the element type.

const ROWS: u32 = ${ROWS}u;
const THREADS: u32 = 128u;
alias Elem = ${ELEM};

fn dot_elem(a: Elem, b: Elem) -> f32 {
    return ${DOT};
}

struct Params {
#fields epilogue
    m: u32,
    n: u32,
    kl: u32,  // K in elements of Elem
    count: u32,  // workgroups in all: n * ceil(m / ROWS)
    row: u32,
}

#bindings x: Elem, wt: Elem, epi, res

var<workgroup> sums: array<f32, ROWS * THREADS>;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let lin = wid.y * p.row + wid.x;
    if (lin >= p.count) {
        return;
    }
    let feature = lin % p.n;
    let m0 = (lin / p.n) * ROWS;
    let wrow = feature * p.kl;
    // rows past M repeat the last one (cached) and are never stored
#unroll r 0 ROWS
    var acc${r} = 0.0;
    let x${r} = min(m0 + ${r}u, p.m - 1u) * p.kl;
#end
    for (var k = lid; k < p.kl; k += THREADS) {
        let wv = wt[wrow + k];
#unroll r 0 ROWS
        acc${r} += dot_elem(x[x${r} + k], wv);
#end
    }
#unroll r 0 ROWS
    sums[${r}u * THREADS + lid] = acc${r};
#end
    workgroupBarrier();
    for (var s = THREADS / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            for (var r = 0u; r < ROWS; r++) {
                sums[r * THREADS + lid] += sums[r * THREADS + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid < ROWS) {
        let m = m0 + lid;
        if (m < p.m) {
            let at = m * p.n + feature;
            out[at] = finish(sums[lid * THREADS], feature, at);
        }
    }
}
