#!/bin/bash
# Llama 3.1 8B on two nodes of eight GPUs (a launch in the style of Megatron-LM's examples/)
GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
TP=2
DATA_PATH=$1

MODEL_ARGS=(
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336
    --num-attention-heads 32 --group-query-attention --num-query-groups 8
    --seq-length 8192 --max-position-embeddings 8192
    --position-embedding-type rope --rotary-base 500000
    --swiglu --normalization RMSNorm --disable-bias-linear
    --untie-embeddings-and-output-weights
    --attention-dropout 0.0 --hidden-dropout 0.0
)
TRAINING_ARGS=(
    --micro-batch-size 1 --global-batch-size 256
    --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --weight-decay 0.1
    --bf16
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP --sequence-parallel
    --use-distributed-optimizer --overlap-grad-reduce
)
DATA_ARGS=(
    --data-path $DATA_PATH --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model meta-llama/Llama-3.1-8B --vocab-size 128256
)

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \
    ${MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${PARALLEL_ARGS[@]} ${DATA_ARGS[@]} \
    --log-interval 10 --save-interval 1000
