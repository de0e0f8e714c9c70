// Softmax over the middle axis of (outer, n, inner): one thread per (outer, inner) line.

struct Params {
    count: u32,  // outer * inner
    row: u32,
    n: u32,
    inner: u32,
}

#bindings x

#per_value main count
    let o = i / p.inner;
    let base = o * p.n * p.inner + (i - o * p.inner);
    var top = x[base];
    for (var j = 1u; j < p.n; j++) {
        top = max(top, x[base + j * p.inner]);
    }
    var sum = 0.0;
    for (var j = 0u; j < p.n; j++) {
        sum += exp(x[base + j * p.inner] - top);
    }
    for (var j = 0u; j < p.n; j++) {
        out[base + j * p.inner] = exp(x[base + j * p.inner] - top) / sum;
    }
}
