// out (..., M, N) = a (..., M, K) @ b (..., K, N) with broadcast batch dimensions (strides 0), one thread per output.
// MatMul is rare in face models (a projection or two); fully connected layers with constant weights are Gemm steps.

struct Params {
    total: u32,
    row: u32,
    m: u32,
    n: u32,
    k: u32,
    a_row: u32,  // a's stride between rows (K), and between k (1)
    a_k: u32,
    b_k: u32,  // b's stride between k (N), and between columns (1)
    b_col: u32,
    batch: vec4<u32>,  // out's batch dims, padded in front with 1
    sa: vec4<u32>,
    sb: vec4<u32>,
}

#bindings a, b

#per_value main total
    let col = i % p.n;
    let r = (i / p.n) % p.m;
    var rest = i / (p.n * p.m);
    var ia = r * p.a_row;
    var ib = col * p.b_col;
    for (var d = 3; d >= 0; d--) {
        let c = rest % p.batch[d];
        rest = rest / p.batch[d];
        ia += c * p.sa[d];
        ib += c * p.sb[d];
    }
    var acc = 0.0;
    for (var k = 0u; k < p.k; k++) {
        acc = fma(a[ia + k * p.a_k], b[ib + k * p.b_k], acc);
    }
    out[i] = acc;
}
