"""The safe unpickler builds data only: the containers protocol 4 and 5 make without a global (sets,
frozensets, bytearrays) come back as data at any depth, anything that needs a global is refused, and an
out-of-band buffer (which would need ``buffers=``) is a broken pickle, never an object."""

from __future__ import annotations

import pickle

import pytest

from ddpdoctor.postmortem import safepickle


@pytest.mark.parametrize("value", [{1, 2}, [1, [2, (3, frozenset())]], {"a": bytearray(b"x")}, [[[[[{3}]]]]]])
def test_containers_made_without_a_global_come_back_as_data(value):
    assert safepickle.loads(pickle.dumps(value, protocol=5)) == value


@pytest.mark.parametrize("value", [{1, 2}, bytearray(b"x"), complex(1, 2), range(3)])
def test_values_that_need_a_global_in_protocol_2_are_refused(value):
    with pytest.raises(safepickle.UnsafePickle, match="refers to (builtins|__builtin__)\\."):
        safepickle.loads(pickle.dumps(value, protocol=2))


def test_an_out_of_band_buffer_is_a_broken_pickle_not_an_object():
    data = pickle.dumps(pickle.PickleBuffer(b"abc"), protocol=5, buffer_callback=lambda b: False)
    with pytest.raises(pickle.UnpicklingError):
        safepickle.loads(data)
