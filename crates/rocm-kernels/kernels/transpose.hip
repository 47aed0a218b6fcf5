// Tiled transposes, all 9 dtypes: the fast path of a strided copy whose last two dims are a
// transposed view of a contiguous block (copy_strided detects it on the host).
//   transpose2d_{T}(src, dst, u64 rows, u64 cols)
//       dst is [batch, rows, cols] contiguous, src is [batch, cols, rows] contiguous, batch =
//       gridDim.z: dst[b][r][c] = src[b][c][r]. Launched with 32 x 8 threads per 32 x 32 tile;
//       the tile goes through shared memory (one padding column against bank conflicts), so
//       both the reads and the writes are coalesced. Pointers arrive offset to the first element.

#define RK_TILE 32

#define RK_TRANSPOSE(T)                                                                      \
    RK_KERNEL void transpose2d_##T(const T* src, T* dst, u64 rows, u64 cols) {               \
        __shared__ alignas(16) unsigned char tile_bytes[RK_TILE * (RK_TILE + 1) * sizeof(T)]; \
        T* tile = reinterpret_cast<T*>(tile_bytes);                                          \
        const u64 plane = rows * cols;                                                       \
        src += (u64)blockIdx.z * plane;                                                      \
        dst += (u64)blockIdx.z * plane;                                                      \
        const u64 c0 = (u64)blockIdx.x * RK_TILE, r0 = (u64)blockIdx.y * RK_TILE;            \
        for (unsigned j = threadIdx.y; j < RK_TILE; j += blockDim.y) {                       \
            const u64 c = c0 + j, r = r0 + threadIdx.x;                                      \
            if (c < cols && r < rows) tile[j * (RK_TILE + 1) + threadIdx.x] = src[c * rows + r]; \
        }                                                                                    \
        __syncthreads();                                                                     \
        for (unsigned j = threadIdx.y; j < RK_TILE; j += blockDim.y) {                       \
            const u64 r = r0 + j, c = c0 + threadIdx.x;                                      \
            if (r < rows && c < cols) dst[r * cols + c] = tile[threadIdx.x * (RK_TILE + 1) + j]; \
        }                                                                                    \
    }

RK_TRANSPOSE(u8)
RK_TRANSPOSE(u32)
RK_TRANSPOSE(i16)
RK_TRANSPOSE(i32)
RK_TRANSPOSE(i64)
RK_TRANSPOSE(bf16)
RK_TRANSPOSE(f16)
RK_TRANSPOSE(f32)
RK_TRANSPOSE(f64)
