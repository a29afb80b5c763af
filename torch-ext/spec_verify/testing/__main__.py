"""`python -m spec_verify.testing` (spec_verify importable by name), or `python <dir>/testing`
(the folder run by path: a built variant's, or one vendored into another project)."""
import sys

if __package__:
    from .cli import main
else:
    import importlib.util
    from pathlib import Path

    # Run by path: the folder is sys.path[0], where its modules would shadow others by their
    # short names; load it as a package of its own instead.
    folder = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != folder]
    spec = importlib.util.spec_from_file_location("spec_verify_testing", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    package = importlib.util.module_from_spec(spec)
    sys.modules["spec_verify_testing"] = package
    spec.loader.exec_module(package)
    main = importlib.import_module("spec_verify_testing.cli").main

sys.exit(main())
