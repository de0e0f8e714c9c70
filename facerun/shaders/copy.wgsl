// A strided copy over a (merged, at most 6-D) index: out[dst0 + sum c_d * dst_d] = x[src0 + sum c_d * src_d].
// Transpose and Slice (a gather into a contiguous out) and each input of a Concat (a contiguous input placed into
// its slice of out) are both this.

struct Params {
    total: u32,
    row: u32,
    src0: u32,
    dst0: u32,
    shape: array<vec4<u32>, 2>,
    src: array<vec4<u32>, 2>,
    dst: array<vec4<u32>, 2>,
}

#bindings x

#per_value main total
    var rest = i;
    var si = p.src0;
    var di = p.dst0;
    for (var d = 5; d >= 0; d--) {
        let size = p.shape[d / 4][d % 4];
        let c = rest % size;
        rest = rest / size;
        si += c * p.src[d / 4][d % 4];
        di += c * p.dst[d / 4][d % 4];
    }
    out[di] = x[si];
}
