"""StrictModel: the base of every config section (rlbridge.contract.config, rlbridge.contract.launchers), whose
unknown keys are errors and whose fields are documented by the docstring under each."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are validated. Each field
    is documented by the docstring under it; `document_fields()` makes those the fields' descriptions."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def document_fields() -> None:
    """Every StrictModel field's description from the docstring written under it, for what reads
    descriptions (`rlbridge schema`, the docs). pydantic's use_attribute_docstrings does this at class
    creation by parsing each class's source: a tenth of `rlbridge plan`'s start-up (benchmarks/startup.py)."""
    import ast
    import inspect
    import textwrap
    import typing

    done: set[type] = set()

    def document(model: type[BaseModel]) -> None:
        if model in done:
            return
        done.add(model)
        for info in model.model_fields.values():  # nested models first: a model's schema embeds theirs
            for candidate in (info.annotation, *typing.get_args(info.annotation)):
                for inner in (candidate, *typing.get_args(candidate)):
                    if isinstance(inner, type) and issubclass(inner, StrictModel):
                        document(inner)
        body = ast.parse(textwrap.dedent(inspect.getsource(model))).body[0].body
        docs = {
            node.target.id: inspect.cleandoc(after.value.value)
            for node, after in zip(body, body[1:])
            if isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        }
        changed = False
        for name, info in model.model_fields.items():
            if info.description is None and name in docs:
                info.description, changed = docs[name], True
        if changed:
            model.model_rebuild(force=True)

    def subclasses(cls: type) -> list[type]:
        return [sub for direct in cls.__subclasses__() for sub in (direct, *subclasses(direct))]

    for model in subclasses(StrictModel):
        document(model)
