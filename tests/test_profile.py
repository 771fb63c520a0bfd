"""benchmarks.profile's op table counts each op's time once: the executor's frames around
ops, the profiler's own marks and events of the input pipeline stay out of it."""

from tensorflow.tsl.profiler.protobuf import xplane_pb2

from benchmarks.profile import leaf_op_ms


def space_with(lines: dict) -> xplane_pb2.XSpace:
    """One host plane; `lines` maps a thread name to (name, start ms, duration ms) events."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    ids = {}
    for thread, events in lines.items():
        line = plane.lines.add(name=thread)
        for name, start, duration in events:
            if name not in ids:
                ids[name] = len(ids) + 1
                plane.event_metadata[ids[name]].name = name
            line.events.add(metadata_id=ids[name], offset_ps=int(start * 1e9), duration_ps=int(duration * 1e9))
    return space


def test_frames_marks_and_the_input_pipeline_are_left_out():
    space = space_with({
        "tf_Compute/1": [
            ("MatMul:_MklMatMul", 0, 4),  # listed before its frame, which starts with it
            ("__inference_step:Process", 0, 10),
            ("ThreadpoolListener::Record", 1, 0),
            ("ParallelFor", 1, 2),  # plain names are not ops
            ("dropout/mul:Mul", 4, 2),
            ("MemoryAllocation", 6, 0),
            ("MatMul_1:_MklMatMul", 6, 3),
        ],
        "tf_Compute/2": [("Adam:ResourceApplyAdam", 20, 5)],
        "tf_data_iterator_resource/3": [("BatchV2:BatchV2", 0, 30)],
    })
    assert leaf_op_ms(space) == {"_MklMatMul": 7.0, "Mul": 2.0, "ResourceApplyAdam": 5.0}
