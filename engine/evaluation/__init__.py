"""Built-in evaluation and benchmarks (DESIGN §10): ``engine eval``, ``engine eval compare``, ``engine bench``.

Every change to the router (priors, fusion, new experts) is judged on suites nobody here wrote,
side by side with each expert alone and a plain BM25 peer, so this package is a surface like
the CLI: it drives :class:`engine.runtime.Router` and never reaches below it.

* :mod:`.suite`: BEIR/CoIR suites (corpus, queries with optional ``class``/``gold_experts``, qrels);
* :mod:`.materialize`: each corpus snapshot as a cached, indexed workspace folder;
* :mod:`.arms`: router, one-expert-alone configs, the ``bm25-peer`` baseline (:mod:`.peer`);
* :mod:`.runner`: runs every arm over every query; :mod:`.metrics` (ranx) and :mod:`.report`
  turn the results into ``metrics.json``, TREC runs, a markdown report and store rows;
* :mod:`.compare`: regression rules between two runs; :mod:`.bench`: latency, overhead,
  index throughput, save-to-searchable and RSS on one workspace.
"""
