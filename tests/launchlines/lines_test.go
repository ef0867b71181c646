package launchlines

import (
	"strings"
	"testing"
)

// subst is line with each old text replaced by its new one; each must be
// there (a line that changed upstream fails here, not silently).
func subst(t *testing.T, line string, oldNew ...string) string {
	t.Helper()
	for i := 0; i < len(oldNew); i += 2 {
		if !strings.Contains(line, oldNew[i]) {
			t.Fatalf("%q is not in the line:\n%s", oldNew[i], line)
		}
		line = strings.ReplaceAll(line, oldNew[i], oldNew[i+1])
	}
	return line
}

// TestTorchtitan: torchtitan's run_train.sh, single node, c10d on
// localhost:0 (a free port), the role "rank" in the console prefix, only
// LOG_RANK's local ranks on the console, every rank's output teed to log
// files, the training module run with -m.
func TestTorchtitan(t *testing.T) {
	t.Parallel()

	// pytorch/torchtitan, run_train.sh (commit 0168bd518f83, the current
	// form), run as its comment says: LOG_RANK=0,1 NGPU=4 ./run_train.sh,
	// here with one override for the trainer. The fake_backend branch,
	// which runs python without torchrun, is left out.
	t.Run("run_train.sh", func(t *testing.T) {
		t.Parallel()
		launch(t, job{
			entry: []string{"-m", "torchtitan.train"}, nproc: []int{4}, role: "rank", runID: "none",
			shown: []int{0, 1}, tee: true,
			env: map[string]string{"PYTORCH_ALLOC_CONF": "expandable_segments:True", "TORCHFT_LIGHTHOUSE": "http://localhost:29510"},
		}, agent{
			env:  []string{"LOG_RANK=0,1", "NGPU=4"},
			args: []string{"--training.steps", "10"},
			shell: `
NGPU=${NGPU:-"8"}
export LOG_RANK=${LOG_RANK:-0}
MODULE=${MODULE:-"llama3"}
CONFIG=${CONFIG:-"llama3_debugmodel"}
COMM_MODE=${COMM_MODE:-""}

TORCHFT_LIGHTHOUSE=${TORCHFT_LIGHTHOUSE:-"http://localhost:29510"}

    PYTORCH_ALLOC_CONF="expandable_segments:True" \
    TORCHFT_LIGHTHOUSE=${TORCHFT_LIGHTHOUSE} \
    torchrun --nproc_per_node=${NGPU} --rdzv_backend c10d --rdzv_endpoint="localhost:0" \
    --local-ranks-filter ${LOG_RANK} --role rank --tee 3 \
    -m torchtitan.train --module ${MODULE} --config ${CONFIG} "$@"
`,
		})
	})

	// pytorch/torchtitan, run_train.sh (commit 47f63f4ba5d3, the form
	// with --job.config_file and $overrides), with its defaults but for
	// NGPU=2: LOG_RANK=0 shows local rank 0 only.
	t.Run("run_train.sh@47f63f4", func(t *testing.T) {
		t.Parallel()
		launch(t, job{
			entry: []string{"-m", "torchtitan.train"}, nproc: []int{2}, role: "rank", runID: "none",
			shown: []int{0}, tee: true,
			env: map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCHFT_LIGHTHOUSE": "http://localhost:29510"},
		}, agent{
			env:  []string{"NGPU=2"},
			args: []string{"--training.steps", "10"},
			shell: `
NGPU=${NGPU:-"8"}
export LOG_RANK=${LOG_RANK:-0}
CONFIG_FILE=${CONFIG_FILE:-"./torchtitan/models/llama3/train_configs/debug_model.toml"}

overrides=""
if [ $# -ne 0 ]; then
    overrides="$*"
fi

TORCHFT_LIGHTHOUSE=${TORCHFT_LIGHTHOUSE:-"http://localhost:29510"}

PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" \
TORCHFT_LIGHTHOUSE=${TORCHFT_LIGHTHOUSE} \
torchrun --nproc_per_node=${NGPU} --rdzv_backend c10d --rdzv_endpoint="localhost:0" \
--local-ranks-filter ${LOG_RANK} --role rank --tee 3 \
-m torchtitan.train --job.config_file ${CONFIG_FILE} $overrides
`,
		})
	})
}

// TestTorchchat: torchchat's run_dist.sh (pytorch/torchchat, run_dist.sh,
// commit 2e3d1dc09f11), with its defaults: 4 workers on the master port
// given as $1 (a free one here, for the script's 29501), every local rank
// on the console and teed to log files, the role "rank".
func TestTorchchat(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	launch(t, job{
		entry: []string{"dist_run.py"}, nproc: []int{4}, role: "rank", masterPort: port,
		shown: []int{0, 1, 2, 3}, tee: true,
	}, agent{
		args: []string{port},
		shell: `
#export CUDA_VISIBLE_DEVICES=4,5,6,7
PORT=${1:-29501}
NGPU=${NGPU:-"4"}
LOG_RANK=${LOG_RANK:-0,1,2,3}
torchrun --nproc-per-node=$NGPU --master_port=$PORT \
--local-ranks-filter ${LOG_RANK} --role rank --tee 3 \
dist_run.py --pp 2 llama3
`,
	})
}

// TestNanoGPT: nanoGPT's lines (karpathy/nanoGPT).
func TestNanoGPT(t *testing.T) {
	t.Parallel()

	// train.py's docstring: "To run with DDP on 4 gpus on 1 node".
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		launch(t, job{entry: []string{"train.py"}, nproc: []int{4}, role: "default"}, agent{
			shell: `torchrun --standalone --nproc_per_node=4 train.py`,
		})
	})

	// README.md, "reproducing GPT-2": two nodes, here both on this
	// machine, the master "with example IP 123.456.123.456" being
	// 127.0.0.1 and its port 1234 a free one.
	//
	//	# Run on the first (master) node with example IP 123.456.123.456:
	//	torchrun --nproc_per_node=8 --nnodes=2 --node_rank=0 --master_addr=123.456.123.456 --master_port=1234 train.py
	//	# Run on the worker node:
	//	torchrun --nproc_per_node=8 --nnodes=2 --node_rank=1 --master_addr=123.456.123.456 --master_port=1234 train.py
	t.Run("two-nodes", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		line := func(rank string) agent {
			return agent{shell: subst(t, `torchrun --nproc_per_node=8 --nnodes=2 --node_rank=`+rank+` --master_addr=123.456.123.456 --master_port=1234 train.py`,
				"123.456.123.456", "127.0.0.1", "--master_port=1234", "--master_port="+port)}
		}
		launch(t, job{
			entry: []string{"train.py"}, nproc: []int{8, 8}, nodeRank: []int{0, 1}, role: "default",
			masterAddr: "127.0.0.1", masterPort: port,
		}, line("0"), line("1"))
	})
}

// TestMegatron: Megatron-LM's DISTRIBUTED_ARGS (NVIDIA/Megatron-LM,
// examples/*/train_*.sh), with the model's arguments after the script as
// the scripts give them.
func TestMegatron(t *testing.T) {
	t.Parallel()

	// examples/gpt3/train_gpt3_175b_distributed.sh (commit 157006d6d9bf):
	// one node of GPUS_PER_NODE=8, the master localhost and the script's
	// port 6000 (a free one here); $1..$5 the script's paths.
	t.Run("train_gpt3_175b_distributed.sh", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		launch(t, job{
			entry: []string{"examples/classes/pretrain_gpt.py"}, nproc: []int{8}, nodeRank: []int{0}, role: "default",
			masterAddr: "localhost", masterPort: port,
			env: map[string]string{"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
		}, agent{
			args:  []string{"ckpt", "tb", "gpt2-vocab.json", "gpt2-merges.txt", "data_text_document"},
			shell: subst(t, megatronGPT3, "MASTER_PORT=6000", "MASTER_PORT="+port),
		})
	})

	// examples/llama/train_llama3_8b_h100_fp8.sh (commit 157006d6d9bf),
	// whose DISTRIBUTED_ARGS name the node rank: two nodes, NUM_NODES=2
	// (the script's 1 changed, as for any multi-node run),
	// GPUS_PER_NODE=2 (the script's 8: the workers join by a gloo
	// all-reduce, and torch is heavy on this machine's 2 cores),
	// MASTER_ADDR, MASTER_PORT and NODE_RANK from the environment, as the
	// script reads them.
	t.Run("train_llama3_8b_h100_fp8.sh/two-nodes", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		shell := subst(t, megatronLlama3, "GPUS_PER_NODE=8", "GPUS_PER_NODE=2", "NUM_NODES=1", "NUM_NODES=2")
		node := func(rank string) agent {
			return agent{shell: shell, env: []string{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "NODE_RANK=" + rank}}
		}
		launch(t, job{
			entry: []string{"examples/classes/pretrain_gpt.py"}, nproc: []int{2, 2}, nodeRank: []int{0, 1}, role: "default",
			masterAddr: "127.0.0.1", masterPort: port, gloo: true,
			env: map[string]string{"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
		}, node("0"), node("1"))
	})
}

// megatronGPT3 is examples/gpt3/train_gpt3_175b_distributed.sh but its
// first line and comments.
const megatronGPT3 = `
export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
# Change for multinode config
MASTER_ADDR=localhost
MASTER_PORT=6000
NUM_NODES=1
NODE_RANK=0
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

CHECKPOINT_PATH=$1 #<Specify path>
TENSORBOARD_LOGS_PATH=$2 #<Specify path>
VOCAB_FILE=$3 #<Specify path to file>/gpt2-vocab.json
MERGE_FILE=$4 #<Specify path to file>/gpt2-merges.txt
DATA_PATH=$5 #<Specify path and file prefix>_text_document

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE 
    --nnodes $NUM_NODES 
    --master_addr $MASTER_ADDR 
    --master_port $MASTER_PORT
)

GPT_MODEL_ARGS=(
    --num-layers 96 
    --hidden-size 12288 
    --num-attention-heads 96 
    --seq-length 2048 
    --max-position-embeddings 2048 
    --attention-backend auto # Can use (flash/fused/unfused/local)
)

TRAINING_ARGS=(
    --micro-batch-size 1 
    --global-batch-size 1536 
    --rampup-batch-size 16 16 5859375 
    --train-iters 500000 
    --weight-decay 0.1 
    --adam-beta1 0.9 
    --adam-beta2 0.95 
    --init-method-std 0.006 
    --clip-grad 1.0 
    --fp16
    --lr 6.0e-5 
    --lr-decay-style cosine 
    --min-lr 6.0e-6
    --lr-warmup-fraction .001 
    --lr-decay-iters 430000 
)

MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 8 
	--pipeline-model-parallel-size 16 
)

DATA_ARGS=(
    --data-path $DATA_PATH 
    --vocab-file $VOCAB_FILE 
    --merge-file $MERGE_FILE 
    --split 949,50,1
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --save-interval 10000 
    --eval-interval 1000 
    --save $CHECKPOINT_PATH 
    --load $CHECKPOINT_PATH 
    --eval-iters 10
    --tensorboard-dir $TENSORBOARD_LOGS_PATH 
)

torchrun ${DISTRIBUTED_ARGS[@]} examples/classes/pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
`

// megatronLlama3 is examples/llama/train_llama3_8b_h100_fp8.sh but its
// first line, commented-out lines, the mkdir of its output folders and
// the check that pretrain_gpt.py is there; with no arguments the script
// takes its MOCK data branch, kept alone here.
const megatronLlama3 = `
# Environment variables for performance tuning
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}

CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b_fp8"}
TENSORBOARD_LOGS_PATH=${2:-"tensorboard_logs/llama3_8b_fp8"}
TOKENIZER_ARG=${3:-"MOCK"} # Path to tokenizer model, or "MOCK"
DATA_ARG=${4:-"MOCK"}     # Data prefix, or "MOCK"

# Distributed training setup
GPUS_PER_NODE=8
NUM_NODES=1
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-6000}
NODE_RANK=${NODE_RANK:-0}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

# Path to the pretrain_gpt.py script, assuming this script is run from the root of the Megatron-LM repository
PRETRAIN_SCRIPT_PATH="examples/classes/pretrain_gpt.py"

# Fixed model and training parameters
TP_SIZE=1     
CP_SIZE=1     
PP_SIZE=1     
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=32  
DTYPE="fp8"
SEQ_LENGTH=8192
MAX_POSITION_EMBEDDINGS=8192

# Data cache path (useful for both mock and real data)
DATA_CACHE_PATH="${PWD}/benchmark_cache_llama3_8b_fp8"

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $MAX_POSITION_EMBEDDINGS
    --position-embedding-type rope
    --rotary-base 1000000 
    --rotary-percent 1.0
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --swiglu
    --init-method-std 0.0134
    --attention-backend fused
    --apply-layernorm-1p 
    --untie-embeddings-and-output-weights
    --disable-bias-linear 
)

TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-samples 1953125000
    --lr-decay-samples 1949218748
    --lr-warmup-samples 3906252
    --lr 0.00015
    --min-lr 0.00001
    --decoupled-lr 5.0e-4      # Specific to decoupled AdamW, ensure optimizer is compatible
    --decoupled-min-lr 4.5e-5  # Specific to decoupled AdamW
    --lr-decay-style cosine
    --clip-grad 1.0
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --calculate-per-token-loss 
    --manual-gc 
    --empty-unused-memory-level 1 
    --exit-duration-in-mins 235 
)

# Conditional arguments based on DTYPE (FP8)
DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
        "--fp8-amax-compute-algo max"
        "--fp8-param-gather"
    )
fi

# Model parallelism arguments
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    # --pipeline-model-parallel-size $PP_SIZE # Not explicitly set in llama script options, assume 1 if not multi-node PP
    --sequence-parallel  # Always enable sequence parallelism with TP_SIZE=2
)

# Distributed Data Parallel (DDP) arguments
# From original script's ddp_args
DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")


# Data arguments (conditional for mock vs real data)
DATA_ARGS_LIST=()
    DATA_ARGS_LIST+=(
        "--mock-data"
        "--tokenizer-type NullTokenizer"
        "--vocab-size 128256" 
        "--data-cache-path ${DATA_CACHE_PATH}"
        "--tiktoken-pattern v2" 
        "--split '99,1,0'"
        "--no-create-attention-mask-in-dataloader"
        "--no-mmap-bin-files"
        "--num-workers 1"
    )

EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --eval-iters 32
    --eval-interval 100
    --save-interval 1000
    --log-throughput
    --profile
    --profile-step-start 4
    --profile-step-end 6
    --ckpt-format torch_dist 
    --distributed-timeout-minutes 60
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH" 
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH"
)

# Run the training command
torchrun ${DISTRIBUTED_ARGS[@]} \
    "$PRETRAIN_SCRIPT_PATH" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
`

// TestAccelerate: Hugging Face accelerate's torchrun lines
// (huggingface/accelerate, examples/README.md, "Simple NLP example").
func TestAccelerate(t *testing.T) {
	t.Parallel()

	// "multi GPUs (using PyTorch distributed mode)", "With traditional
	// PyTorch launcher".
	t.Run("single-node", func(t *testing.T) {
		t.Parallel()
		launch(t, job{entry: []string{"./nlp_example.py"}, nproc: []int{2}, role: "default"}, agent{
			shell: `        torchrun --nproc_per_node 2 ./nlp_example.py`,
		})
	})

	// "multi GPUs, multi node", "With PyTorch launcher only ... Run this
	// command on each node". The README's line carries two shell comments
	// after its backslashes,
	//
	//	torchrun \ # python -m torch.distributed.run
	//	    --nproc_per_node 2 \
	//	    --nnodes 2 \
	//	    --rdzv_id 2299 \ # A unique job id
	//	    --rdzv_backend c10d \
	//	    --rdzv_endpoint master_node_ip_address:29500 \
	//	    ./nlp_example.py
	//
	// which no shell runs as one command (`\ ` escapes the space, the
	// line ends at the newline): here without those two comments, flags
	// and order as they are, master_node_ip_address:29500 being
	// 127.0.0.1 and a free port. No token anywhere: both nodes have one
	// HOME, through which gorun shares one.
	t.Run("two-nodes-c10d", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		shell := subst(t, `        torchrun \
            --nproc_per_node 2 \
            --nnodes 2 \
            --rdzv_id 2299 \
            --rdzv_backend c10d \
            --rdzv_endpoint master_node_ip_address:29500 \
            ./nlp_example.py
`, "master_node_ip_address:29500", "127.0.0.1:"+port)
		launch(t, job{entry: []string{"./nlp_example.py"}, nproc: []int{2, 2}, role: "default", runID: "2299"},
			agent{shell: shell}, agent{shell: shell})
	})
}

// TestElasticQuickstart: the elastic line of torchrun's usage
// (pytorch/pytorch, torch/distributed/run.py, module docstring, "Elastic
// (min=1, max=4, tolerates up to 3 membership changes or failures)"),
// on two agents of different NUM_TRAINERS (2 and 1): one world of 3, ranks
// 0..2.
//
//	torchrun
//	    --nnodes=1:4
//	    --nproc-per-node=$NUM_TRAINERS
//	    --max-restarts=3
//	    --rdzv-id=$JOB_ID
//	    --rdzv-backend=c10d
//	    --rdzv-endpoint=$HOST_NODE_ADDR
//	    YOUR_TRAINING_SCRIPT.py (--arg1 ... train script args...)
//
// With 2 of at most 4 nodes the round closes only when its last call ends
// (30 s by default): the agents get PET_RDZV_CONF=last_call_timeout=1 in
// their environment, the line itself unchanged. Should the round close
// with one agent before the other joins, that world's workers wait (the
// stand-in's LAUNCHLINES_WAIT_WORLD) until the late agent's arrival makes
// a new round of both, as the line's --max-restarts=3 allows.
func TestElasticQuickstart(t *testing.T) {
	t.Parallel()
	line := `torchrun --nnodes=1:4 --nproc-per-node=$NUM_TRAINERS --max-restarts=3 --rdzv-id=$JOB_ID --rdzv-backend=c10d --rdzv-endpoint=$HOST_NODE_ADDR YOUR_TRAINING_SCRIPT.py --arg1 value`
	node := func(trainers, port string) agent {
		return agent{shell: line, env: []string{"NUM_TRAINERS=" + trainers, "JOB_ID=quickstart", "HOST_NODE_ADDR=localhost:" + port, "PET_RDZV_CONF=last_call_timeout=1"}}
	}

	// Both agents started at once.
	t.Run("two-agents", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		launch(t, job{
			entry: []string{"YOUR_TRAINING_SCRIPT.py"}, nproc: []int{2, 1}, role: "default", runID: "quickstart", maxRestarts: "3",
			gloo: true, waitWorld: 3,
		}, node("2", port), node("1", port))
	})

	// The second agent (NUM_TRAINERS=1) started only once the first one's
	// round of 2 workers runs: its arrival ends that round, and the next
	// one is the world of 3 (the membership change the line's elastic
	// range is for). The workers meet over TCP here, not gloo: torch is
	// heavy on this machine.
	t.Run("late-agent", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		late := node("1", port)
		late.lateAfter = "WORLD_SIZE=2: waiting to be replaced"
		launch(t, job{
			entry: []string{"YOUR_TRAINING_SCRIPT.py"}, nproc: []int{2, 1}, role: "default", runID: "quickstart", maxRestarts: "3",
			waitWorld: 3,
		}, node("2", port), late)
	})
}
