"""Every public result is a typed Result: to_dict (JSON-ready), to_json and to_frame, from one base."""

import importlib
import inspect
import json
import pkgutil

import evalgauge
from evalgauge.results import Result


def public_classes_with_to_dict() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(evalgauge.__path__, "evalgauge."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an extra that is not installed here (inspect-ai): its module is not a result's home
            continue
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and not name.startswith("_") and "to_dict" in cls.__dict__:
                found.append(cls)
    return found


def test_every_public_class_with_to_dict_is_a_result():
    classes = public_classes_with_to_dict()
    assert len(classes) > 20  # the walk reached the package's results
    assert [f"{c.__module__}.{c.__name__}" for c in classes if not issubclass(c, Result)] == []


def test_a_result_made_typed_has_the_trio():
    from evalgauge.analysis.diagnostics import missing_answers
    from evalgauge.collect.runner import RunSummary

    summary = RunSummary(planned=4, already_done=1)
    assert json.loads(summary.to_json())["planned"] == 4 and len(summary.to_frame()) == 1
    import pandas as pd

    calls = pd.DataFrame({"judge": ["j", "j"], "score": [1.0, None], "completion": ["Score: 1", ""],
                          "parse_error": [None, "no verdict"], "system": ["a", "b"], "item": ["i", "i"]})
    found = missing_answers(calls)
    assert isinstance(found, Result) and isinstance(json.loads(found.to_json()), dict)
