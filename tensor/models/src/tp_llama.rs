//! The llama-style decoder of [`llama`] split over several devices with
//! Megatron-style tensor parallelism, as candle's `llama_multiprocess` example does it with
//! NCCL: one rank per device, one thread per rank in this process.
//!
//! What each rank holds (`n` ranks, rank `r`):
//!
//! | weight | split | communication |
//! |---|---|---|
//! | `q_proj`, `k_proj`, `v_proj` | rows: heads `[r * heads / n, ..)` and kv heads `[r * kv / n, ..)` ([`Split::Rows`]) | none |
//! | `o_proj` | columns of those heads ([`Split::Columns`]) | all-reduce (sum) of the partial outputs |
//! | `gate_proj`, `up_proj` | rows: `[r * intermediate / n, ..)` | none |
//! | `down_proj` | columns of that slice | all-reduce (sum) |
//! | `lm_head` | rows `[r * vocab / n, ..)` when the vocabulary divides by `n`, else whole on rank 0 | all-gather of the logits when split |
//! | embeddings, RMSNorm scales | whole on every rank ([`Split::Replicated`]) | none |
//!
//! Every rank therefore runs attention over its own heads (with its own KV cache of its kv
//! heads) and its slice of the MLP, and after each of the two all-reduces per layer every rank
//! holds the same hidden state. The shards are cut from the **same full weights** the one-device
//! [`llama::build`] takes ([`shard_weights`]), so the tensor-parallel model computes the
//! one-device model's function: with one rank it runs the same candle ops on the same values
//! (the all-reduce of one rank is a copy), with several only the order of the sums differs.
//!
//! [`plan`] checks that a configuration splits evenly over `n` ranks (heads, kv heads and the
//! MLP width must divide by `n`; otherwise [`Error::UnevenSplit`]). [`generate_tp`] builds one
//! rank per device and decodes greedily with the KV cache, returning rank 0's tokens and
//! logits:
//!
//! * on ROCm devices (distinct GPUs) the ranks talk through RCCL/NCCL communicators created
//!   together ([`RocmComm::init_all`], non-blocking init with a timeout);
//! * on CPU devices (`[Device::Cpu; n]`) through host memory: a reference implementation of the
//!   collectives that lets the split itself be tested without GPUs.
//!
//! **Errors, not hangs.** A failure on any rank (an error, a panic) is returned by
//! [`generate_tp`] as that rank's error. The other ranks do not wait for it forever: the
//! failing rank marks the run as failed and aborts its communicator (`ncclCommAbort`); ranks
//! waiting on the host for a token, or polling their GPU for the end of a step, see the mark
//! and abort theirs, which cancels collectives stuck waiting for the failed peer. A rank that
//! waits longer than [`RANK_TIMEOUT`] gives up the same way.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm};
use candle_rocm::collective::{CommConfig, ReduceOp, RocmComm};
use candle_rocm::{RocmDeviceExt, RocmError};
use candle_transformers::models::llama::{Config, Llama3RopeType};

use crate::error::{invalid, Error, Result};
use crate::llama;

/// The longest a rank waits for its peers (a rendezvous on the host, the GPU work of one step)
/// before it gives up with [`Error::RankFailed`]; generous, since the first step of a cold run
/// may compile kernels.
pub const RANK_TIMEOUT: Duration = Duration::from_secs(300);

// ------------------------------------------------------------------------------------ plan

/// How a configuration is split over `nranks` ranks ([`plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpPlan {
    /// The number of ranks.
    pub nranks: usize,
    /// Features per attention head (`hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// Query heads of each rank.
    pub heads_per_rank: usize,
    /// Key/value heads of each rank.
    pub kv_heads_per_rank: usize,
    /// MLP width (`intermediate_size`) of each rank.
    pub intermediate_per_rank: usize,
    /// Whether `lm_head` is split by rows (vocabulary entries) over the ranks, followed by an
    /// all-gather of the logits; `false` (a vocabulary that does not divide by `nranks`): rank 0
    /// holds the whole `lm_head` and computes the logits alone.
    pub lm_head_split: bool,
}

/// Checks that `cfg` can be split over `nranks` ranks and says how: the query heads, the
/// key/value heads and the MLP width must divide by `nranks` ([`Error::UnevenSplit`] naming the
/// first that does not), `nranks` must be positive and `cfg` valid
/// ([`llama::validate_config`]). Pure: no device is touched.
pub fn plan(cfg: &Config, nranks: usize) -> Result<TpPlan> {
    llama::validate_config(cfg)?;
    if nranks == 0 {
        return Err(invalid("tensor parallelism needs at least one rank"));
    }
    for (what, size) in [
        ("num_attention_heads", cfg.num_attention_heads),
        ("num_key_value_heads", cfg.num_key_value_heads),
        ("intermediate_size", cfg.intermediate_size),
    ] {
        if size % nranks != 0 {
            return Err(Error::UnevenSplit { what, size, nranks });
        }
    }
    Ok(TpPlan {
        nranks,
        head_dim: cfg.hidden_size / cfg.num_attention_heads,
        heads_per_rank: cfg.num_attention_heads / nranks,
        kv_heads_per_rank: cfg.num_key_value_heads / nranks,
        intermediate_per_rank: cfg.intermediate_size / nranks,
        lm_head_split: cfg.vocab_size % nranks == 0,
    })
}

/// How one weight of the full model is divided among the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Every rank holds the whole tensor.
    Replicated,
    /// Rank `r` of `n` holds rows `[r * rows / n, (r + 1) * rows / n)` of the `(out, in)`
    /// weight: a column-parallel layer (a slice of the output features).
    Rows,
    /// Rank `r` of `n` holds that range of columns: a row-parallel layer (a slice of the input
    /// features; the partial products are summed by an all-reduce).
    Columns,
    /// Only rank 0 holds the tensor (`lm_head` when the vocabulary does not divide by `n`).
    RankZero,
}

/// The [`Split`] of the weight called `name` (a name of [`llama::weight_shapes`]) under `plan`.
pub fn split_of(name: &str, plan: &TpPlan) -> Split {
    const ROWS: [&str; 5] = [
        ".self_attn.q_proj.weight",
        ".self_attn.k_proj.weight",
        ".self_attn.v_proj.weight",
        ".mlp.gate_proj.weight",
        ".mlp.up_proj.weight",
    ];
    const COLUMNS: [&str; 2] = [".self_attn.o_proj.weight", ".mlp.down_proj.weight"];
    if ROWS.iter().any(|s| name.ends_with(s)) {
        Split::Rows
    } else if COLUMNS.iter().any(|s| name.ends_with(s)) {
        Split::Columns
    } else if name == LM_HEAD {
        if plan.lm_head_split {
            Split::Rows
        } else {
            Split::RankZero
        }
    } else {
        Split::Replicated
    }
}

const EMBED: &str = "model.embed_tokens.weight";
const LM_HEAD: &str = "lm_head.weight";

/// Rank `rank`'s part of `full` under `split` among `nranks` ranks, on `full`'s device:
/// `None` for a [`Split::RankZero`] tensor on another rank. A dimension that does not divide
/// evenly is an [`Error::UnevenSplit`].
pub fn shard(full: &Tensor, split: Split, rank: usize, nranks: usize) -> Result<Option<Tensor>> {
    if rank >= nranks {
        return Err(invalid(format!(
            "tensor parallelism: rank {rank} is not in 0..{nranks}"
        )));
    }
    let (dim, what) = match split {
        Split::Replicated => return Ok(Some(full.clone())),
        Split::RankZero => return Ok((rank == 0).then(|| full.clone())),
        Split::Rows => (0, "rows of a weight"),
        Split::Columns => (1, "columns of a weight"),
    };
    let size = full.dim(dim)?;
    if size % nranks != 0 {
        return Err(Error::UnevenSplit { what, size, nranks });
    }
    let part = size / nranks;
    Ok(Some(full.narrow(dim, rank * part, part)?.contiguous()?))
}

/// Rank `rank`'s shards of the full weights of `cfg` (as [`llama::random_weights`] makes them
/// and [`llama::build`] takes them), on the weights' device and in their dtype. Every weight of
/// [`llama::weight_shapes`] is checked (present, right shape, float). A tied `lm_head` is cut
/// from the embeddings and returned as `lm_head.weight`; a [`Split::RankZero`] `lm_head` is
/// absent on the other ranks.
pub fn shard_weights(
    cfg: &Config,
    plan: &TpPlan,
    full: &HashMap<String, Tensor>,
    rank: usize,
) -> Result<HashMap<String, Tensor>> {
    let checked = plan_matches(cfg, plan)?;
    let specs = llama::weight_shapes(cfg)?;
    let mut out = HashMap::with_capacity(specs.len() + 1);
    for s in &specs {
        let t = full
            .get(&s.name)
            .ok_or_else(|| invalid(format!("tp_llama: missing weight {}", s.name)))?;
        if t.dims() != s.shape.as_slice() {
            return Err(invalid(format!(
                "tp_llama: {} has shape {:?}, the config needs {:?}",
                s.name,
                t.dims(),
                s.shape
            )));
        }
        if !t.dtype().is_float() {
            return Err(invalid(format!(
                "tp_llama: {} has non-float dtype {:?}",
                s.name,
                t.dtype()
            )));
        }
        if let Some(part) = shard(t, split_of(&s.name, &checked), rank, plan.nranks)? {
            out.insert(s.name.clone(), part);
        }
    }
    if cfg.tie_word_embeddings {
        let embed = full
            .get(EMBED)
            .ok_or_else(|| invalid(format!("tp_llama: missing weight {EMBED}")))?;
        if let Some(part) = shard(embed, split_of(LM_HEAD, &checked), rank, plan.nranks)? {
            out.insert(LM_HEAD.to_string(), part);
        }
    }
    Ok(out)
}

/// `plan` as [`plan`] computes it for `cfg` (a plan made for another configuration is an error).
fn plan_matches(cfg: &Config, given: &TpPlan) -> Result<TpPlan> {
    let expected = plan(cfg, given.nranks)?;
    if expected != *given {
        return Err(invalid(format!(
            "tp_llama: the plan {given:?} is not the one of this configuration ({expected:?})"
        )));
    }
    Ok(expected)
}

// ------------------------------------------------------------------------- collectives

/// The collectives one rank needs, on its device: the sum over the ranks of a tensor, the
/// ranks' tensors stacked, and waiting for the device with a way out when a peer failed.
trait Collective: Send {
    fn rank(&self) -> usize;
    /// The element-wise sum of every rank's `t` (same shape and dtype on every rank), the same
    /// on every rank.
    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor>;
    /// Every rank's `t` stacked in rank order: shape `(nranks, ..t.shape())`.
    fn all_gather(&self, t: &Tensor) -> Result<Tensor>;
    /// Waits until the work queued on this rank's device has finished; an error as soon as
    /// `peer_failed` names a failed rank, the communicator reports an error, or [`RANK_TIMEOUT`]
    /// passes.
    fn wait_idle(&self, peer_failed: &dyn Fn() -> Option<usize>) -> Result<()>;
    /// Gives up: queued and running collectives are cancelled (peers blocked in one see an
    /// error instead of waiting for this rank).
    fn abort(self: Box<Self>);
}

impl Collective for RocmComm {
    fn rank(&self) -> usize {
        RocmComm::rank(self)
    }

    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor> {
        Ok(self.all_reduce_tensor(t, ReduceOp::Sum)?)
    }

    fn all_gather(&self, t: &Tensor) -> Result<Tensor> {
        Ok(self.all_gather_tensor(t)?)
    }

    fn wait_idle(&self, peer_failed: &dyn Fn() -> Option<usize>) -> Result<()> {
        const OP: &str = "tp_llama: waiting for the step";
        let stream = self.device().stream();
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            if stream
                .query()
                .map_err(|e| candle_core::Error::from(RocmError::hip(OP, e)))?
            {
                return Ok(());
            }
            if let Some(peer) = peer_failed() {
                return Err(stopped_by(RocmComm::rank(self), peer));
            }
            self.comm()
                .check_async_error()
                .map_err(|e| candle_core::Error::from(RocmError::library(OP, "RCCL/NCCL", e)))?;
            if start.elapsed() > RANK_TIMEOUT {
                return Err(Error::RankFailed {
                    rank: RocmComm::rank(self),
                    reason: format!(
                        "the GPU work of one step did not finish within {RANK_TIMEOUT:?}"
                    ),
                });
            }
            // A decode step takes milliseconds: spin briefly, then sleep in short slices.
            if polls < 256 {
                polls += 1;
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn abort(self: Box<Self>) {
        RocmComm::abort(*self);
    }
}

/// Collectives through host memory for ranks whose tensors are on the CPU: each rank hands its
/// tensor to a shared [`Rendezvous`] and reads everyone's back (sums in rank order, so every
/// rank gets the same bits).
struct HostComm {
    rank: usize,
    group: Arc<Rendezvous<Tensor>>,
}

impl HostComm {
    fn group(nranks: usize) -> Vec<HostComm> {
        let group = Arc::new(Rendezvous::new(nranks, RANK_TIMEOUT));
        (0..nranks)
            .map(|rank| HostComm {
                rank,
                group: group.clone(),
            })
            .collect()
    }
}

impl Collective for HostComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor> {
        let all = self.group.exchange(self.rank, t.clone())?;
        let mut parts = all.iter();
        let mut acc = parts
            .next()
            .cloned()
            .ok_or_else(|| invalid("all-reduce over no ranks"))?;
        for p in parts {
            acc = (acc + p)?;
        }
        Ok(acc)
    }

    fn all_gather(&self, t: &Tensor) -> Result<Tensor> {
        let all = self.group.exchange(self.rank, t.clone())?;
        Ok(Tensor::stack(all.as_slice(), 0)?)
    }

    fn wait_idle(&self, _peer_failed: &dyn Fn() -> Option<usize>) -> Result<()> {
        // CPU ops have finished when they return.
        Ok(())
    }

    fn abort(self: Box<Self>) {
        self.group.fail(self.rank);
    }
}

/// `rank` stopped because `peer` failed.
fn stopped_by(rank: usize, peer: usize) -> Error {
    Error::RankFailed {
        rank,
        reason: format!("stopped because rank {peer} failed"),
    }
}

/// A reusable meeting point of `nranks` threads that exchange one value each, and that can be
/// broken: once a rank calls [`Rendezvous::fail`], every waiting and later
/// [`Rendezvous::exchange`] returns an error instead of blocking.
struct Rendezvous<T> {
    nranks: usize,
    timeout: Duration,
    state: Mutex<RendezvousState<T>>,
    changed: Condvar,
}

struct RendezvousState<T> {
    /// The values of the round in progress.
    slots: Vec<Option<T>>,
    /// How many ranks have arrived in the round in progress.
    arrived: usize,
    /// Rounds completed.
    round: u64,
    /// The values of the last completed round.
    last: Arc<Vec<T>>,
    /// The first rank that failed.
    failed: Option<usize>,
}

impl<T: Clone> Rendezvous<T> {
    fn new(nranks: usize, timeout: Duration) -> Self {
        Rendezvous {
            nranks,
            timeout,
            state: Mutex::new(RendezvousState {
                slots: vec![None; nranks],
                arrived: 0,
                round: 0,
                last: Arc::new(Vec::new()),
                failed: None,
            }),
            changed: Condvar::new(),
        }
    }

    /// The state; a thread that panicked while holding the lock left it consistent (every
    /// update below is a single assignment or completes before the guard is dropped).
    fn lock(&self) -> MutexGuard<'_, RendezvousState<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands in `value` for `rank` and returns every rank's value of this round, in rank order,
    /// once all have arrived; an error when a rank failed or [`Rendezvous::timeout`] passed.
    fn exchange(&self, rank: usize, value: T) -> Result<Arc<Vec<T>>> {
        let mut s = self.lock();
        if let Some(peer) = s.failed {
            return Err(stopped_by(rank, peer));
        }
        let slot = s
            .slots
            .get_mut(rank)
            .ok_or_else(|| invalid(format!("rendezvous: rank {rank} of {}", self.nranks)))?;
        if slot.is_some() {
            return Err(invalid(format!(
                "rendezvous: rank {rank} arrived twice in one round"
            )));
        }
        *slot = Some(value);
        s.arrived += 1;
        if s.arrived == self.nranks {
            let values: Vec<T> = s.slots.iter_mut().filter_map(Option::take).collect();
            s.last = Arc::new(values);
            s.arrived = 0;
            s.round += 1;
            self.changed.notify_all();
            return Ok(s.last.clone());
        }
        let round = s.round;
        let deadline = Instant::now() + self.timeout;
        loop {
            if s.round != round {
                // The round completed (even if a rank failed since): its values stay in `last`
                // until this rank arrives in the next round.
                return Ok(s.last.clone());
            }
            if let Some(peer) = s.failed {
                return Err(stopped_by(rank, peer));
            }
            let now = Instant::now();
            if now >= deadline {
                let reason = format!(
                    "waited {:?} for the other ranks ({} of {} arrived)",
                    self.timeout, s.arrived, self.nranks
                );
                s.failed.get_or_insert(rank);
                self.changed.notify_all();
                return Err(Error::RankFailed { rank, reason });
            }
            s = self
                .changed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Marks `rank` as failed (the first failure is kept) and wakes every waiting rank.
    fn fail(&self, rank: usize) {
        self.lock().failed.get_or_insert(rank);
        self.changed.notify_all();
    }

    /// The first rank that failed.
    fn failed(&self) -> Option<usize> {
        self.lock().failed
    }
}

// --------------------------------------------------------------------------- the model

/// One decoder layer of one rank.
#[derive(Debug)]
struct Block {
    input_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// One rank's model: its shards on its device.
#[derive(Debug)]
struct TpRank {
    plan: TpPlan,
    use_flash_attn: bool,
    embed: Embedding,
    blocks: Vec<Block>,
    norm: RmsNorm,
    /// `None` on ranks other than 0 when `lm_head` is not split.
    lm_head: Option<Linear>,
}

/// `t` on `device`: a peer copy between two ROCm devices (not through the host), else candle's
/// `to_device`.
fn move_to(t: &Tensor, device: &Device) -> Result<Tensor> {
    if t.device().same_device(device) {
        Ok(t.clone())
    } else if t.device().is_rocm() && device.is_rocm() {
        Ok(candle_rocm::collective::to_device(t, device)?)
    } else {
        Ok(t.to_device(device)?)
    }
}

/// The fused-attention path of candle-transformers' llama (candle-nn's `sdpa`, candle-rocm's
/// kernels) needs a ROCm device and a head dim with a kernel.
fn check_flash_attn(cfg: &Config, plan: &TpPlan, device: &Device) -> Result<()> {
    if !cfg.use_flash_attn {
        return Ok(());
    }
    if !device.is_rocm() {
        return Err(invalid(format!(
            "tp_llama: use_flash_attn needs fused attention, which runs on ROCm devices, not on \
             {:?}; set it to false",
            device.location()
        )));
    }
    if !candle_rocm::attention::HEAD_DIMS.contains(&plan.head_dim) {
        return Err(invalid(format!(
            "tp_llama: use_flash_attn: head dim {} has no fused kernel (supported: {:?})",
            plan.head_dim,
            candle_rocm::attention::HEAD_DIMS
        )));
    }
    Ok(())
}

impl TpRank {
    /// Rank `rank`'s model from its `shards` ([`shard_weights`]), in `dtype` on `device`.
    fn build(
        cfg: &Config,
        plan: &TpPlan,
        rank: usize,
        shards: &HashMap<String, Tensor>,
        dtype: DType,
        device: &Device,
    ) -> Result<TpRank> {
        check_flash_attn(cfg, plan, device)?;
        let get = |name: &str| -> Result<Tensor> {
            let t = shards
                .get(name)
                .ok_or_else(|| invalid(format!("tp_llama: rank {rank} has no shard of {name}")))?;
            Ok(move_to(t, device)?.to_dtype(dtype)?)
        };
        let linear = |name: String| -> Result<Linear> { Ok(Linear::new(get(&name)?, None)) };
        let norm =
            |name: String| -> Result<RmsNorm> { Ok(RmsNorm::new(get(&name)?, cfg.rms_norm_eps)) };
        let mut blocks = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            blocks.push(Block {
                input_norm: norm(format!("{p}.input_layernorm.weight"))?,
                q: linear(format!("{p}.self_attn.q_proj.weight"))?,
                k: linear(format!("{p}.self_attn.k_proj.weight"))?,
                v: linear(format!("{p}.self_attn.v_proj.weight"))?,
                o: linear(format!("{p}.self_attn.o_proj.weight"))?,
                post_norm: norm(format!("{p}.post_attention_layernorm.weight"))?,
                gate: linear(format!("{p}.mlp.gate_proj.weight"))?,
                up: linear(format!("{p}.mlp.up_proj.weight"))?,
                down: linear(format!("{p}.mlp.down_proj.weight"))?,
            });
        }
        let lm_head = if plan.lm_head_split || rank == 0 {
            Some(linear(LM_HEAD.to_string())?)
        } else {
            None
        };
        Ok(TpRank {
            plan: *plan,
            use_flash_attn: cfg.use_flash_attn,
            embed: Embedding::new(get(EMBED)?, cfg.hidden_size),
            blocks,
            norm: norm("model.norm.weight".to_string())?,
            lm_head,
        })
    }

    /// Logits (f32 `[batch, vocab]`) of the last position of `tokens` (`u32 [batch, seq]` on
    /// this rank's device) at positions `index_pos..`, updating `cache`; `None` on ranks that
    /// do not compute logits (ranks other than 0 when `lm_head` is not split). Every rank must
    /// call it with the same tokens (the collectives pair up).
    fn forward(
        &self,
        comm: &dyn Collective,
        tokens: &Tensor,
        index_pos: usize,
        cache: &mut TpCache,
    ) -> Result<Option<Tensor>> {
        let (_, seq_len) = tokens.dims2()?;
        if seq_len == 0 {
            return Err(invalid("tp_llama: forward of an empty sequence"));
        }
        let mut x = self.embed.forward(tokens)?;
        for (layer, b) in self.blocks.iter().enumerate() {
            let h = b.input_norm.forward(&x)?;
            let attn = comm.all_reduce_sum(&self.attention(b, &h, index_pos, layer, cache)?)?;
            x = (attn + &x)?;
            let h = b.post_norm.forward(&x)?;
            let mlp = (candle_nn::ops::silu(&b.gate.forward(&h)?)? * b.up.forward(&h)?)?;
            let mlp = comm.all_reduce_sum(&b.down.forward(&mlp)?)?;
            x = (mlp + &x)?;
        }
        let Some(lm_head) = &self.lm_head else {
            return Ok(None);
        };
        let x = self.norm.forward(&x)?;
        let x = x.i((.., seq_len - 1, ..))?.contiguous()?;
        let logits = lm_head.forward(&x)?;
        let logits = if self.plan.lm_head_split {
            // (nranks, batch, vocab / nranks) -> (batch, vocab).
            let g = comm.all_gather(&logits)?;
            let (n, b, part) = g.dims3()?;
            g.transpose(0, 1)?.reshape((b, n * part))?
        } else {
            logits
        };
        Ok(Some(logits.to_dtype(DType::F32)?))
    }

    /// This rank's heads of causal self-attention over `x` (`[batch, seq, hidden]`, normed):
    /// its partial `o_proj` output `[batch, seq, hidden]` (to be summed over the ranks).
    fn attention(
        &self,
        b: &Block,
        x: &Tensor,
        index_pos: usize,
        layer: usize,
        cache: &mut TpCache,
    ) -> Result<Tensor> {
        let (bsz, seq_len, _) = x.dims3()?;
        let (heads, kv_heads, hd) = (
            self.plan.heads_per_rank,
            self.plan.kv_heads_per_rank,
            self.plan.head_dim,
        );
        let q =
            b.q.forward(x)?
                .reshape((bsz, seq_len, heads, hd))?
                .transpose(1, 2)?
                .contiguous()?;
        let k =
            b.k.forward(x)?
                .reshape((bsz, seq_len, kv_heads, hd))?
                .transpose(1, 2)?
                .contiguous()?;
        let mut v =
            b.v.forward(x)?
                .reshape((bsz, seq_len, kv_heads, hd))?
                .transpose(1, 2)?;
        let cos = cache.cos.narrow(0, index_pos, seq_len)?;
        let sin = cache.sin.narrow(0, index_pos, seq_len)?;
        let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
        let mut k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
        let kv = cache
            .kvs
            .get_mut(layer)
            .ok_or_else(|| invalid(format!("tp_llama: the cache has no layer {layer}")))?;
        if let Some((ck, cv)) = kv.as_ref() {
            k = Tensor::cat(&[ck, &k], 2)?.contiguous()?;
            v = Tensor::cat(&[cv, &v], 2)?.contiguous()?;
        }
        *kv = Some((k.clone(), v.clone()));
        let n_rep = heads / kv_heads;
        let k = candle_transformers::utils::repeat_kv(k, n_rep)?;
        let v = candle_transformers::utils::repeat_kv(v, n_rep)?;
        let y = if self.use_flash_attn {
            let scale = 1f32 / (hd as f32).sqrt();
            candle_nn::ops::sdpa(&q, &k, &v, None, seq_len > 1, scale, 1.0)?
        } else {
            let in_dtype = q.dtype();
            let q = q.to_dtype(DType::F32)?;
            let k = k.to_dtype(DType::F32)?;
            let v = v.to_dtype(DType::F32)?;
            let att = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?;
            let att = if seq_len == 1 {
                att
            } else {
                let mask = cache.mask(seq_len, index_pos)?.broadcast_as(att.shape())?;
                let neg_inf =
                    Tensor::new(f32::NEG_INFINITY, att.device())?.broadcast_as(att.shape())?;
                mask.where_cond(&neg_inf, &att)?
            };
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            att.matmul(&v.contiguous()?)?.to_dtype(in_dtype)?
        };
        let y = y.transpose(1, 2)?.reshape((bsz, seq_len, heads * hd))?;
        Ok(b.o.forward(&y)?)
    }
}

/// One rank's KV cache (its kv heads), rotary tables and causal masks, computed as
/// candle-transformers' llama `Cache` computes them.
struct TpCache {
    kvs: Vec<Option<(Tensor, Tensor)>>,
    cos: Tensor,
    sin: Tensor,
    masks: HashMap<(usize, usize), Tensor>,
    device: Device,
}

impl TpCache {
    fn new(cfg: &Config, plan: &TpPlan, dtype: DType, device: &Device) -> Result<TpCache> {
        let hd = plan.head_dim;
        let base: Vec<f32> = (0..hd)
            .step_by(2)
            .map(|i| 1f32 / cfg.rope_theta.powf(i as f32 / hd as f32))
            .collect();
        let inv_freq = match &cfg.rope_scaling {
            Some(s) if !matches!(s.rope_type, Llama3RopeType::Default) => {
                // Llama 3's frequency-dependent scaling of the rotary frequencies.
                let orig = s.original_max_position_embeddings as f32;
                let low_wavelen = orig / s.low_freq_factor;
                let high_wavelen = orig / s.high_freq_factor;
                base.into_iter()
                    .map(|freq| {
                        let wavelen = 2. * std::f32::consts::PI / freq;
                        if wavelen < high_wavelen {
                            freq
                        } else if wavelen > low_wavelen {
                            freq / s.factor
                        } else {
                            let smooth = (orig / wavelen - s.low_freq_factor)
                                / (s.high_freq_factor - s.low_freq_factor);
                            (1. - smooth) * freq / s.factor + smooth * freq
                        }
                    })
                    .collect()
            }
            _ => base,
        };
        let n = inv_freq.len();
        let inv_freq = Tensor::new(inv_freq, device)?;
        let max_pos = cfg.max_position_embeddings;
        let max_pos_u32 = u32::try_from(max_pos).map_err(|_| {
            invalid(format!(
                "tp_llama: max_position_embeddings {max_pos} exceeds u32"
            ))
        })?;
        let angles = Tensor::arange(0, max_pos_u32, device)?
            .to_dtype(DType::F32)?
            .reshape((max_pos, 1))?
            .matmul(&inv_freq.reshape((1, n))?)?;
        Ok(TpCache {
            kvs: vec![None; cfg.num_hidden_layers],
            cos: angles.cos()?.to_dtype(dtype)?,
            sin: angles.sin()?.to_dtype(dtype)?,
            masks: HashMap::new(),
            device: device.clone(),
        })
    }

    fn mask(&mut self, seq_len: usize, index_pos: usize) -> Result<Tensor> {
        let key = (seq_len, index_pos + seq_len);
        if let Some(m) = self.masks.get(&key) {
            return Ok(m.clone());
        }
        let m = candle_transformers::utils::build_causal_mask(seq_len, index_pos, &self.device)?;
        self.masks.insert(key, m.clone());
        Ok(m)
    }
}

// ------------------------------------------------------------------------ generation

/// The result of a tensor-parallel greedy decode ([`generate_tp`]): rank 0's tokens and
/// logits, with timings.
#[derive(Debug, Clone)]
pub struct TpGeneration {
    /// The number of ranks.
    pub nranks: usize,
    /// The generated tokens (the prompt excluded).
    pub tokens: Vec<u32>,
    /// For each generated token, the logits it was chosen from: f32 `[vocab]` on the CPU
    /// (the first: the logits of the prompt's last position).
    pub logits: Vec<Tensor>,
    /// Time to shard the weights, move them to the ranks' devices and build the ranks (rank 0's
    /// view, until every rank was ready).
    pub build: Duration,
    /// Time of the first step (the prompt's forward pass, logits copied to the host).
    pub prefill: Duration,
    /// Time of the remaining steps (one token each).
    pub decode: Duration,
}

impl TpGeneration {
    /// Tokens per second of the one-token steps (0 when there were none).
    pub fn decode_tokens_per_sec(&self) -> f64 {
        llama::decode_tokens_per_sec(self.tokens.len(), self.decode)
    }
}

/// Greedy decoding of `steps` tokens after `prompt` with the llama-style model of `cfg` split
/// over `devices` (rank `i` on `devices[i]`), one thread per rank: the prompt's forward pass,
/// then one pass per further token with each rank's KV cache, as [`llama::generate`] does on
/// one device. Returns rank 0's tokens and logits.
///
/// `weights` are the full weights of the one-device model ([`llama::random_weights`] on any
/// device, any float dtype); each rank cuts its shards from them ([`shard_weights`]) and moves
/// them to its device (a peer copy between ROCm devices) in `dtype` (f32, f16 or bf16).
/// `devices` are all ROCm devices of distinct GPUs (RCCL/NCCL communicators), or all the CPU
/// (host-memory collectives: a reference for tests). Rank 0 picks each token (argmax on the
/// host, first index on ties) and hands it to the other ranks.
///
/// Errors: [`Error::UnevenSplit`] when `cfg` does not split over `devices.len()` ranks
/// ([`plan`]), [`Error::InvalidInput`] for a bad prompt, dtype or device list, and the error of
/// the first rank that failed while building or decoding (the others stop and abort their
/// communicators instead of waiting for it).
pub fn generate_tp(
    devices: &[Device],
    cfg: &Config,
    weights: &HashMap<String, Tensor>,
    dtype: DType,
    prompt: &[u32],
    steps: usize,
) -> Result<TpGeneration> {
    let plan = plan(cfg, devices.len())?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(invalid(format!(
            "tp_llama: dtype {dtype:?} is not supported (use f32, f16 or bf16)"
        )));
    }
    check_prompt(cfg, prompt, steps)?;
    let comms = communicators(devices)?;
    let coord: Rendezvous<u32> = Rendezvous::new(plan.nranks, RANK_TIMEOUT);
    let results = run_ranks(comms, &coord, |rank, comm| {
        let device = devices
            .get(rank)
            .ok_or_else(|| invalid(format!("tp_llama: no device for rank {rank}")))?;
        decode_rank(&RankJob {
            cfg,
            plan: &plan,
            weights,
            dtype,
            device,
            prompt,
            steps,
            coord: &coord,
            comm,
        })
    })?;
    results
        .into_iter()
        .next()
        .flatten()
        .ok_or_else(|| invalid("tp_llama: rank 0 returned no generation"))
}

/// [`generate_tp`] with the weights [`llama::random_weights`] generates on `devices[0]` from
/// `seed` in f32: the same weights as a one-device model built from
/// `llama::random_weights(cfg, &devices[0], seed)`.
pub fn generate_tp_seeded(
    devices: &[Device],
    cfg: &Config,
    seed: u64,
    prompt: &[u32],
    steps: usize,
) -> Result<TpGeneration> {
    plan(cfg, devices.len())?;
    let first = devices
        .first()
        .ok_or_else(|| invalid("tensor parallelism needs at least one device"))?;
    let weights = llama::random_weights(cfg, first, seed)?;
    generate_tp(devices, cfg, &weights, DType::F32, prompt, steps)
}

/// The checks of [`llama::generate`]: a non-empty prompt of vocabulary tokens that fits the
/// positions with `steps` tokens.
fn check_prompt(cfg: &Config, prompt: &[u32], steps: usize) -> Result<()> {
    if prompt.is_empty() {
        return Err(invalid("tp_llama: empty prompt"));
    }
    if let Some(bad) = prompt.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        return Err(invalid(format!(
            "tp_llama: prompt token {bad} is outside the vocabulary of {}",
            cfg.vocab_size
        )));
    }
    let positions = prompt.len() + steps.saturating_sub(1);
    if positions > cfg.max_position_embeddings {
        return Err(invalid(format!(
            "tp_llama: {} prompt tokens + {steps} steps need {positions} positions, the model has {}",
            prompt.len(),
            cfg.max_position_embeddings
        )));
    }
    Ok(())
}

/// One communicator per device: RCCL/NCCL for ROCm devices of distinct GPUs, host memory for
/// CPU devices.
fn communicators(devices: &[Device]) -> Result<Vec<Box<dyn Collective>>> {
    if devices.iter().all(Device::is_cpu) {
        return Ok(HostComm::group(devices.len())
            .into_iter()
            .map(|c| Box::new(c) as Box<dyn Collective>)
            .collect());
    }
    let mut rocm = Vec::with_capacity(devices.len());
    for d in devices {
        if !d.is_rocm() {
            return Err(invalid(format!(
                "tp_llama: the devices must be all ROCm devices or all the CPU, got {:?}",
                devices.iter().map(Device::location).collect::<Vec<_>>()
            )));
        }
        let r = d.as_rocm_device()?;
        if rocm
            .iter()
            .any(|o: &candle_rocm::RocmDevice| o.ordinal() == r.ordinal())
        {
            return Err(invalid(format!(
                "tp_llama: ROCm device {} appears twice (one rank per GPU: RCCL/NCCL refuse two \
                 ranks on one device)",
                r.ordinal()
            )));
        }
        rocm.push(r.clone());
    }
    Ok(RocmComm::init_all(&rocm, CommConfig::default())?
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn Collective>)
        .collect())
}

/// Runs `body(rank, comm)` for every communicator, one thread each, and returns every rank's
/// value in rank order, or the error of the first rank that failed. A rank whose body fails or
/// panics marks `coord` failed and aborts its communicator, so that peers blocked in a
/// rendezvous, a collective or a wait for their device stop (their bodies return errors)
/// instead of waiting for it.
fn run_ranks<R, F>(
    comms: Vec<Box<dyn Collective>>,
    coord: &Rendezvous<u32>,
    body: F,
) -> Result<Vec<R>>
where
    R: Send,
    F: Fn(usize, &dyn Collective) -> Result<R> + Sync,
{
    let body = &body;
    let mut results: Vec<Result<R>> = std::thread::scope(|scope| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, comm)| {
                let handle = std::thread::Builder::new()
                    .name(format!("tp-rank-{rank}"))
                    .spawn_scoped(scope, move || {
                        let out = catch_unwind(AssertUnwindSafe(|| body(rank, &*comm)))
                            .unwrap_or_else(|panic| {
                                Err(Error::RankFailed {
                                    rank,
                                    reason: format!("panicked: {}", panic_message(&*panic)),
                                })
                            });
                        if out.is_err() {
                            coord.fail(rank);
                            comm.abort();
                        }
                        out
                    });
                if handle.is_err() {
                    // The thread could not start (its communicator was dropped with the
                    // closure): stop the ranks already running before joining any of them.
                    coord.fail(rank);
                }
                (rank, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(rank, h)| match h {
                Ok(h) => h.join().unwrap_or_else(|panic| {
                    Err(Error::RankFailed {
                        rank,
                        reason: format!("panicked: {}", panic_message(&*panic)),
                    })
                }),
                Err(e) => Err(Error::RankFailed {
                    rank,
                    reason: format!("could not start its thread: {e}"),
                }),
            })
            .collect()
    });
    // The cause: the error of the first rank that failed (the others say they stopped).
    if let Some(first) = coord.failed() {
        if first < results.len() && results[first].is_err() {
            return Err(match results.swap_remove(first) {
                Err(e) => e,
                Ok(_) => stopped_by(first, first),
            });
        }
    }
    results.into_iter().collect()
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// What one rank of [`generate_tp`] needs.
struct RankJob<'a> {
    cfg: &'a Config,
    plan: &'a TpPlan,
    weights: &'a HashMap<String, Tensor>,
    dtype: DType,
    device: &'a Device,
    prompt: &'a [u32],
    steps: usize,
    coord: &'a Rendezvous<u32>,
    comm: &'a dyn Collective,
}

/// One rank of [`generate_tp`]: build, wait for every rank to be built (no collective starts
/// before), then decode; rank 0 reads the logits and picks each token, and every rank takes
/// rank 0's token from the rendezvous. Returns the generation on rank 0, `None` elsewhere.
fn decode_rank(job: &RankJob<'_>) -> Result<Option<TpGeneration>> {
    let rank = job.comm.rank();
    let start = Instant::now();
    let shards = shard_weights(job.cfg, job.plan, job.weights, rank)?;
    let model = TpRank::build(job.cfg, job.plan, rank, &shards, job.dtype, job.device)?;
    drop(shards);
    let mut cache = TpCache::new(job.cfg, job.plan, job.dtype, job.device)?;
    job.coord.exchange(rank, 0)?;
    let build = start.elapsed();

    let mut all = job.prompt.to_vec();
    let mut tokens = Vec::with_capacity(job.steps);
    let mut logits = Vec::with_capacity(job.steps);
    let mut prefill = Duration::ZERO;
    let start = Instant::now();
    for step in 0..job.steps {
        // The prompt once, then only the newest token at its position.
        let (ctx, pos) = if step == 0 {
            (&all[..], 0)
        } else {
            (&all[all.len() - 1..], all.len() - 1)
        };
        let input = Tensor::new(ctx, job.device)?.unsqueeze(0)?;
        let out = model.forward(job.comm, &input, pos, &mut cache)?;
        let mine = match out {
            Some(row) if rank == 0 => {
                // Poll instead of a blocking read: a failed peer must not leave rank 0 waiting
                // forever for a collective that never completes.
                job.comm.wait_idle(&|| job.coord.failed())?;
                let row = row.squeeze(0)?.to_device(&Device::Cpu)?;
                let next = llama::host_argmax(&row, step, "tp_llama")?;
                logits.push(row);
                next
            }
            _ => 0,
        };
        let next = job
            .coord
            .exchange(rank, mine)?
            .first()
            .copied()
            .ok_or_else(|| invalid("tp_llama: no token from rank 0"))?;
        all.push(next);
        tokens.push(next);
        if step == 0 {
            prefill = start.elapsed();
        }
    }
    let decode = start.elapsed().saturating_sub(prefill);
    Ok((rank == 0).then_some(TpGeneration {
        nranks: job.plan.nranks,
        tokens,
        logits,
        build,
        prefill,
        decode,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_with(heads: usize, kv: usize) -> Config {
        Config {
            num_attention_heads: heads,
            num_key_value_heads: kv,
            ..llama::config_tiny()
        }
    }

    #[test]
    fn plan_splits_heads_mlp_and_lm_head() {
        let p = plan(&llama::config_125m(), 4).unwrap();
        assert_eq!(
            p,
            TpPlan {
                nranks: 4,
                head_dim: 64,
                heads_per_rank: 3,
                kv_heads_per_rank: 1,
                intermediate_per_rank: 512,
                lm_head_split: true,
            }
        );
        let one = plan(&llama::config_125m(), 1).unwrap();
        assert_eq!((one.heads_per_rank, one.kv_heads_per_rank), (12, 4));
        // A vocabulary that does not divide: lm_head stays whole on rank 0.
        let odd = Config {
            vocab_size: 501,
            ..llama::config_tiny()
        };
        let p = plan(&odd, 2).unwrap();
        assert!(!p.lm_head_split);
        assert_eq!(split_of(LM_HEAD, &p), Split::RankZero);
    }

    #[test]
    fn uneven_splits_are_typed_errors() {
        // 12 heads over 5 ranks.
        match plan(&llama::config_125m(), 5) {
            Err(Error::UnevenSplit { what, size, nranks }) => {
                assert_eq!((what, size, nranks), ("num_attention_heads", 12, 5))
            }
            other => panic!("expected UnevenSplit, got {other:?}"),
        }
        // 12 heads divide by 3, 4 kv heads do not.
        match plan(&llama::config_125m(), 3) {
            Err(Error::UnevenSplit { what, size, nranks }) => {
                assert_eq!((what, size, nranks), ("num_key_value_heads", 4, 3))
            }
            other => panic!("expected UnevenSplit, got {other:?}"),
        }
        // Heads and kv heads divide by 4, the MLP width 2050 does not.
        let cfg = Config {
            intermediate_size: 2050,
            ..llama::config_125m()
        };
        match plan(&cfg, 4) {
            Err(Error::UnevenSplit { what, .. }) => assert_eq!(what, "intermediate_size"),
            other => panic!("expected UnevenSplit, got {other:?}"),
        }
        let msg = plan(&llama::config_125m(), 8).unwrap_err().to_string();
        assert!(
            msg.contains("num_attention_heads = 12") && msg.contains("8 ranks"),
            "{msg}"
        );
        assert!(matches!(
            plan(&llama::config_125m(), 0),
            Err(Error::InvalidInput(_))
        ));
        // generate_tp refuses before building anything (three CPU ranks, 4 heads).
        let cfg = llama::config_tiny();
        let w = llama::random_weights(&cfg, &Device::Cpu, 1).unwrap();
        let devices = vec![Device::Cpu; 3];
        let r = generate_tp(&devices, &cfg, &w, DType::F32, &[1, 2], 2);
        assert!(
            matches!(r, Err(Error::UnevenSplit { nranks: 3, .. })),
            "{r:?}"
        );
        let r = generate_tp(&[], &cfg, &w, DType::F32, &[1, 2], 2);
        assert!(matches!(r, Err(Error::InvalidInput(_))), "{r:?}");
        let r = generate_tp(&devices[..2], &cfg, &w, DType::F32, &[1, 9999], 2);
        assert!(matches!(r, Err(Error::InvalidInput(_))), "{r:?}");
        let r = generate_tp(&devices[..2], &cfg, &w, DType::U32, &[1, 2], 2);
        assert!(matches!(r, Err(Error::InvalidInput(_))), "{r:?}");
    }

    #[test]
    fn shards_put_back_together_are_the_full_weights() {
        for tied in [false, true] {
            let cfg = Config {
                tie_word_embeddings: tied,
                ..tiny_with(8, 4)
            };
            let full = llama::random_weights(&cfg, &Device::Cpu, 5).unwrap();
            for n in [1, 2, 4] {
                let p = plan(&cfg, n).unwrap();
                let ranks: Vec<_> = (0..n)
                    .map(|r| shard_weights(&cfg, &p, &full, r).unwrap())
                    .collect();
                let mut names: Vec<_> = full.keys().cloned().collect();
                if tied {
                    names.push(LM_HEAD.to_string());
                }
                for name in names {
                    let whole = if tied && name == LM_HEAD {
                        &full[EMBED]
                    } else {
                        &full[&name]
                    };
                    let parts: Vec<&Tensor> = ranks.iter().map(|m| &m[&name]).collect();
                    let back = match split_of(&name, &p) {
                        Split::Replicated | Split::RankZero => {
                            for part in &parts {
                                assert_eq!(part.dims(), whole.dims(), "{name}");
                            }
                            parts[n - 1].clone()
                        }
                        Split::Rows => Tensor::cat(&parts, 0).unwrap(),
                        Split::Columns => Tensor::cat(&parts, 1).unwrap(),
                    };
                    let d = (back - whole)
                        .unwrap()
                        .abs()
                        .unwrap()
                        .max_all()
                        .unwrap()
                        .to_scalar::<f32>()
                        .unwrap();
                    assert_eq!(d, 0.0, "{name} over {n} ranks");
                }
                // Rank 0's q_proj: its heads' rows, contiguous.
                let q = &ranks[0]["model.layers.0.self_attn.q_proj.weight"];
                assert_eq!(q.dims(), [64 / n, 64]);
                assert!(q.is_contiguous());
                let o = &ranks[n - 1]["model.layers.1.self_attn.o_proj.weight"];
                assert_eq!(o.dims(), [64, 64 / n]);
                assert!(o.is_contiguous());
                let down = &ranks[0]["model.layers.1.mlp.down_proj.weight"];
                assert_eq!(down.dims(), [64, 160 / n]);
            }
        }
    }

    #[test]
    fn shard_checks_its_arguments() {
        let t = Tensor::zeros((6, 4), DType::F32, &Device::Cpu).unwrap();
        assert!(matches!(
            shard(&t, Split::Columns, 0, 3),
            Err(Error::UnevenSplit { size: 4, .. })
        ));
        assert!(matches!(
            shard(&t, Split::Rows, 3, 3),
            Err(Error::InvalidInput(_))
        ));
        assert_eq!(
            shard(&t, Split::Rows, 2, 3).unwrap().unwrap().dims(),
            [2, 4]
        );
        assert!(shard(&t, Split::RankZero, 1, 3).unwrap().is_none());
        // A missing or misshapen weight is an error, not a panic.
        let cfg = llama::config_tiny();
        let p = plan(&cfg, 2).unwrap();
        let mut w = llama::random_weights(&cfg, &Device::Cpu, 1).unwrap();
        w.remove("model.norm.weight");
        assert!(matches!(
            shard_weights(&cfg, &p, &w, 0),
            Err(Error::InvalidInput(_))
        ));
        let other = plan(&tiny_with(8, 4), 2).unwrap();
        let w = llama::random_weights(&cfg, &Device::Cpu, 1).unwrap();
        assert!(matches!(
            shard_weights(&cfg, &other, &w, 0),
            Err(Error::InvalidInput(_))
        ));
    }

    /// The split model on N CPU "devices" (host collectives) decodes the one-device model's
    /// tokens: with one rank bit for bit, with 2 and 4 up to the order of the sums.
    #[test]
    fn cpu_ranks_match_the_one_device_model() {
        let prompt = [1u32, 45, 300, 17, 9, 211];
        let steps = 12;
        for (cfg, ranks) in [
            (llama::config_tiny(), vec![1, 2]),
            (tiny_with(8, 4), vec![4]),
            (
                // lm_head whole on rank 0 (501 entries do not split over 2).
                Config {
                    vocab_size: 501,
                    ..llama::config_tiny()
                },
                vec![2],
            ),
            (
                Config {
                    tie_word_embeddings: true,
                    ..tiny_with(8, 2)
                },
                vec![2],
            ),
        ] {
            let weights = llama::random_weights(&cfg, &Device::Cpu, 11).unwrap();
            let one = llama::build(&cfg, &weights, DType::F32, &Device::Cpu).unwrap();
            let reference = llama::generate(&one, &prompt, steps, true).unwrap();
            for n in ranks {
                let devices = vec![Device::Cpu; n];
                let tp = generate_tp(&devices, &cfg, &weights, DType::F32, &prompt, steps).unwrap();
                assert_eq!(tp.nranks, n);
                assert_eq!(tp.tokens, reference.tokens, "{n} ranks");
                assert_eq!(tp.logits.len(), steps);
                let worst = llama::largest_logit_difference(&tp.logits, &reference.logits).unwrap();
                println!(
                    "{n} ranks: tokens {:?}, largest logit difference {worst:e}",
                    tp.tokens
                );
                if n == 1 {
                    assert_eq!(worst, 0.0, "one rank runs the same ops");
                } else {
                    assert!(worst < 1e-4, "{n} ranks: {worst}");
                }
            }
        }
    }

    #[test]
    fn cpu_ranks_in_bf16_match_the_one_device_model() {
        let cfg = llama::config_tiny();
        let weights = llama::random_weights(&cfg, &Device::Cpu, 3).unwrap();
        let one = llama::build(&cfg, &weights, DType::BF16, &Device::Cpu).unwrap();
        let reference = llama::generate(&one, &[1, 2, 3], 4, true).unwrap();
        let tp = generate_tp(&[Device::Cpu], &cfg, &weights, DType::BF16, &[1, 2, 3], 4).unwrap();
        assert_eq!(tp.tokens, reference.tokens);
        assert_eq!(
            llama::largest_logit_difference(&tp.logits[..1], &reference.logits[..1]).unwrap(),
            0.0
        );
    }

    #[test]
    fn a_failed_rank_stops_the_others() {
        let coord = Rendezvous::new(3, Duration::from_secs(30));
        let comms: Vec<Box<dyn Collective>> = HostComm::group(3)
            .into_iter()
            .map(|c| Box::new(c) as Box<dyn Collective>)
            .collect();
        let t0 = Instant::now();
        let r: Result<Vec<()>> = run_ranks(comms, &coord, |rank, comm| {
            let t = Tensor::ones(4, DType::F32, &Device::Cpu)?;
            // Every rank takes part in one all-reduce, then rank 2 fails: ranks 0 and 1 are
            // blocked in the second all-reduce (and would wait forever).
            let s = comm.all_reduce_sum(&t)?;
            assert_eq!(s.to_vec1::<f32>()?, [3.0; 4]);
            if rank == 2 {
                return Err(invalid("rank 2 fails on purpose"));
            }
            comm.all_reduce_sum(&t)?;
            Ok(())
        });
        assert!(t0.elapsed() < Duration::from_secs(20));
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("rank 2 fails on purpose"), "{msg}");

        // A panic is an error too, and the ranks waiting for a token stop.
        let coord = Rendezvous::new(2, Duration::from_secs(30));
        let comms: Vec<Box<dyn Collective>> = HostComm::group(2)
            .into_iter()
            .map(|c| Box::new(c) as Box<dyn Collective>)
            .collect();
        let r: Result<Vec<u32>> = run_ranks(comms, &coord, |rank, _comm| {
            if rank == 0 {
                panic!("rank 0 panics on purpose");
            }
            Ok(coord.exchange(rank, 7)?[0])
        });
        match r {
            Err(Error::RankFailed { rank: 0, reason }) => {
                assert!(reason.contains("rank 0 panics on purpose"), "{reason}")
            }
            other => panic!("expected rank 0's panic, got {other:?}"),
        }
    }

    #[test]
    fn rendezvous_exchanges_in_rank_order_and_times_out() {
        let rv = Rendezvous::new(3, Duration::from_secs(30));
        let out: Vec<Vec<usize>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|r| {
                    let rv = &rv;
                    s.spawn(move || {
                        let mut seen = Vec::new();
                        for round in 0..5 {
                            let v = rv.exchange(r, r * 10 + round).unwrap();
                            seen.push(v.iter().sum::<usize>());
                            assert_eq!(v[r], r * 10 + round);
                        }
                        seen
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for seen in out {
            assert_eq!(seen, [30, 33, 36, 39, 42]);
        }
        let rv: Rendezvous<u32> = Rendezvous::new(2, Duration::from_millis(50));
        match rv.exchange(0, 1) {
            Err(Error::RankFailed { rank: 0, reason }) => assert!(reason.contains("1 of 2")),
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert_eq!(rv.failed(), Some(0));
        assert!(rv.exchange(1, 1).is_err());
    }
}
