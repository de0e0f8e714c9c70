// A reduction over the middle axis of (outer, n, inner): one thread per (outer, inner) line; kind one of RED_*.

struct Params {
    count: u32,  // outer * inner
    row: u32,
    n: u32,
    inner: u32,
    kind: u32,
}

#bindings x

#per_value main count
    let o = i / p.inner;
    let base = o * p.n * p.inner + (i - o * p.inner);
    var acc = 0.0;
    if (p.kind == RED_MAX || p.kind == RED_MIN) {
        acc = x[base];
    }
    for (var j = 0u; j < p.n; j++) {
        let v = x[base + j * p.inner];
        switch p.kind {
            case RED_MAX: { acc = max(acc, v); }
            case RED_MIN: { acc = min(acc, v); }
            case RED_L1: { acc += abs(v); }
            case RED_L2, RED_SUMSQUARE: { acc = fma(v, v, acc); }
            case RED_SUM, RED_MEAN, default: { acc += v; }
        }
    }
    if (p.kind == RED_MEAN) {
        acc = acc / f32(p.n);
    } else if (p.kind == RED_L2) {
        acc = sqrt(acc);
    }
    out[i] = acc;
}
