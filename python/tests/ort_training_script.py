"""An onnxruntime-training on-device script, as onnxruntime's documentation
writes one, with only its imports changed (test_training.py runs it):
generate the artifacts offline, then train an MLP on scikit-learn's digits
with CheckpointState, Module and Optimizer, evaluate, and export."""
from onyx.training import artifacts  # was: from onnxruntime.training import artifacts
from onyx.training.api import CheckpointState, Module, Optimizer  # was: onnxruntime.training.api


def offline(onnx_model, requires_grad, frozen_params, artifact_dir):
    artifacts.generate_artifacts(
        onnx_model,
        requires_grad=requires_grad,
        frozen_params=frozen_params,
        loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=artifacts.OptimType.AdamW,
        artifact_directory=artifact_dir,
    )


def train(artifact_dir, batches, epochs, lr):
    """Returns the mean training loss of each epoch, the final eval loss and
    the trained state."""
    state = CheckpointState.load_checkpoint(f"{artifact_dir}/checkpoint")
    model = Module(f"{artifact_dir}/training_model.onnx", state,
                   f"{artifact_dir}/eval_model.onnx", device="cpu")
    optimizer = Optimizer(f"{artifact_dir}/optimizer_model.onnx", model)
    optimizer.set_learning_rate(lr)
    epoch_losses = []
    for _ in range(epochs):
        model.train()
        losses = []
        for x, y in batches:
            loss = model(x, y)
            optimizer.step()
            model.lazy_reset_grad()
            losses.append(float(loss))
        epoch_losses.append(sum(losses) / len(losses))
    model.eval()
    eval_loss = sum(float(model(x, y)) for x, y in batches) / len(batches)
    return epoch_losses, eval_loss, model, state
