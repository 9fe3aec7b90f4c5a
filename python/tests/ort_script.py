"""A script written for onnxruntime, with only its import changed
(test_ort_script.py runs it): the usual steps of an onnxruntime user."""
import onyx as ort  # was: import onnxruntime as ort


def infer(model_path, inputs):
    """inputs: arrays in the order of the model's inputs. Returns
    {output name: array}."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 1
    providers = [p for p in ["CUDAExecutionProvider", "CPUExecutionProvider"]
                 if p in ort.get_available_providers()]
    sess = ort.InferenceSession(model_path, sess_options=so, providers=providers)
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))
