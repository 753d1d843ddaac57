"""`rlbridge import`: an engine recipe read statically and solved into a canonical config (recipe_import.py: the
entry point; solver.py: the search over the config's knobs, config_schema.py: those knobs as dotted paths;
verdicts.py: each setting the search left mapped, kept as an option or in conflict, and why; output.py: the config
and notes to write; differences.py: the engine defaults a plan changes; report.py: the result and its report;
recipe.py: the readers adapters' importers use (what an importer provides and returns is the contract's,
rlbridge.contract.importing); shell_reader.py, shell_expansion.py, shell_syntax.py: the static bash reader of
launch scripts). Above the run: the solver resolves configs as a run would."""
