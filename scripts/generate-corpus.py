#!/usr/bin/env python3
"""Generates the offline paper corpus of the research scenario.

Writes examples/research/corpus/<topic>.jsonl: one JSON paper per line, in the
format documented in examples/research/CORPUS.md. The papers are synthetic
(invented authors, methods and numbers) but have the shape and length of real
abstracts: a contribution, a method, the data or benchmarks, results with
numbers and limitations, each written from many sentence templates so that
extractive summaries and claims have something to work with.

The output is deterministic: the same seed gives the same bytes, so the
corpus can be regenerated and diffed. Python 3 standard library only.

Usage: scripts/generate-corpus.py [--seed N] [--out DIR] [--check]
  --check   regenerate in memory and fail if the files on disk differ
"""

import argparse
import json
import os
import random
import sys

SEED = 20240611
PAPERS_PER_TOPIC = 30
DEFAULT_OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "examples", "research", "corpus"
)

FIRST_NAMES = [
    "Aisha", "Alejandro", "Amara", "Anders", "Ananya", "Andrei", "Beatriz", "Bo", "Camille",
    "Chen", "Chiara", "Daniel", "Dmitri", "Elena", "Emeka", "Fatima", "Felix", "Hana",
    "Hiroshi", "Ingrid", "Isabel", "Jakob", "Jia", "José", "Kavya", "Kenji", "Lars",
    "Laura", "Lucía", "Mariam", "Marta", "Mateo", "Mei", "Mohammed", "Nadia", "Niamh",
    "Noah", "Oluwaseun", "Omar", "Priya", "Rafael", "Ravi", "Rosa", "Sanjay", "Sara",
    "Sebastian", "Siobhan", "Sofia", "Tariq", "Thomas", "Valentina", "Wei", "Yara", "Yusuf",
    "Zeynep", "Zoë",
]
LAST_NAMES = [
    "Abebe", "Andersson", "Banerjee", "Becker", "Bianchi", "Chen", "Costa", "Dubois",
    "Eriksen", "Fernández", "Fischer", "García", "Gupta", "Haddad", "Hoffmann", "Ito",
    "Ivanova", "Jensen", "Kim", "Kowalski", "Kumar", "Larsen", "Li", "Lindqvist", "Liu",
    "Martins", "Mensah", "Moreau", "Müller", "Nakamura", "Nguyen", "Novak", "Okafor",
    "O'Brien", "Patel", "Petrov", "Popescu", "Quispe", "Rahman", "Rossi", "Santos",
    "Schmidt", "Silva", "Singh", "Sørensen", "Tanaka", "Tran", "Van Dijk", "Wang",
    "Watanabe", "Wójcik", "Yamamoto", "Yilmaz", "Zhang", "Zhou",
]

# Cross-cutting themes: a paper may carry one besides its subtopic, which
# lets claims group papers across subtopics (and queries like "privacy"
# reach several topics).
CROSS_THEMES = {
    "efficiency": [
        "Efficiency is a first-class goal: we report {cost} alongside accuracy for every configuration.",
        "Because {cost} dominates deployment cost, we optimise for it explicitly rather than as an afterthought.",
    ],
    "robustness": [
        "We stress-test every system under distribution shift, e.g. {hard_case}, instead of reporting in-distribution numbers only.",
        "Robustness matters as much as average accuracy here, so we also report worst-case behaviour on {hard_case}.",
    ],
    "privacy": [
        "All experiments keep raw data on the machine that produced it, and we account for what each component can observe.",
        "We treat privacy leakage as a measured quantity and bound what an honest-but-curious observer learns from the system.",
    ],
    "scalability": [
        "We scale the evaluation to deployments two orders of magnitude larger than in prior studies.",
        "Scalability is the focus: we measure how {cost} grows as the workload increases tenfold.",
    ],
    "benchmarking": [
        "To make comparisons fair, we re-run all baselines with identical budgets and report variance over five seeds.",
        "We pay particular attention to evaluation methodology, since small protocol changes reorder published leaderboards.",
    ],
    "interpretability": [
        "Every prediction comes with an explanation that a domain expert can inspect.",
        "We also analyse which internal signals drive the decisions, to make failures easier to diagnose.",
    ],
}

TOPICS = [
    {
        "slug": "rag",
        "cross": ["efficiency", "robustness", "benchmarking", "interpretability", "scalability"],
        "file": "retrieval-augmented-generation",
        "tag": "retrieval-augmented-generation",
        "name": "retrieval-augmented generation",
        "title_name": "Retrieval-Augmented Generation",
        "years": (2020, 2026),
        "venues": ["arXiv", "ACL", "EMNLP", "NAACL", "NeurIPS", "ICLR", "TACL", "SIGIR"],
        "tasks": ["open-domain question answering", "fact verification", "multi-hop question answering",
                  "long-form question answering", "knowledge-grounded dialogue"],
        "system": "retrieval-augmented generator",
        "prefixes": ["Cite", "Ground", "Hop", "Span", "Memo", "Fuse", "Atlas", "Lumen", "Trace", "Anchor",
                     "Recall", "Sift"],
        "suffixes": ["RAG", "Ret", "QA", "Gen", "Former", "Lens", "Read", "Mind"],
        "problems": [
            "Large language models answer fluently but hallucinate facts that are absent from their training data.",
            "Retrieval-augmented generation grounds a language model in documents fetched at inference time, yet the retriever and the generator are usually trained in isolation.",
            "Knowledge stored in model parameters goes stale, and retraining a large model for every update is impractical.",
            "Prior pipelines, such as the retrieve-then-read design of Lewis et al., assume that the top passages are relevant, which often fails for complex questions.",
        ],
        "subthemes": [
            {"tag": "dense-retrieval", "name": "dense retrieval",
             "title": "Dense Passage Retrieval for {Task}",
             "mechanism": "encodes questions and passages with a contrastively trained dual encoder and retrieves by inner product",
             "mechanism2": "mines hard negatives from the retriever's own mistakes during training",
             "components": ["a dual-encoder retriever", "an approximate nearest-neighbour index", "in-batch negatives"],
             "benefit": "relevant passages are found even when they share few words with the question"},
            {"tag": "reranking", "name": "passage reranking",
             "title": "Cross-Encoder Reranking for {Task}",
             "mechanism": "reranks the retrieved candidates with a cross-encoder before generation",
             "mechanism2": "distils the cross-encoder's relevance scores into a cheaper first-stage retriever",
             "components": ["a cross-encoder reranker", "a first-stage BM25 retriever", "listwise distillation"],
             "benefit": "the generator sees fewer but more relevant passages"},
            {"tag": "query-rewriting", "name": "query rewriting",
             "title": "Query Rewriting Improves {Task}",
             "mechanism": "rewrites the user question into several focused search queries before retrieval",
             "mechanism2": "learns the rewriting policy from the downstream answer reward",
             "components": ["a small query-rewriting model", "reinforcement learning from answer accuracy", "query decomposition"],
             "benefit": "multi-part questions retrieve evidence for every part"},
            {"tag": "hallucination", "name": "hallucination reduction",
             "title": "Reducing Hallucination in {Task} with Citation Constraints",
             "mechanism": "constrains the generator to cite a retrieved passage for every generated sentence",
             "mechanism2": "verifies each generated claim against its cited passage with an entailment model",
             "components": ["an entailment verifier", "citation-constrained decoding", "sentence-level attribution"],
             "benefit": "unsupported statements are detected before they reach the user"},
            {"tag": "long-context", "name": "long-context retrieval",
             "title": "Retrieval or Long Context? Revisiting {Task}",
             "mechanism": "compresses retrieved passages into a short context that preserves answer-bearing spans",
             "mechanism2": "compares retrieval against simply feeding a long-context model the whole corpus",
             "components": ["a passage compressor", "a long-context language model", "span-level extraction"],
             "benefit": "the context window is spent on evidence rather than on noise"},
        ],
        "datasets": ["Natural Questions", "TriviaQA", "HotpotQA", "MS MARCO", "BEIR", "KILT", "PopQA", "FEVER"],
        "metrics": [("exact match", 35, 72, "pct"), ("F1", 40, 80, "pct"), ("recall@20", 60, 92, "pct"),
                    ("answer faithfulness", 55, 93, "pct"), ("nDCG@10", 0.30, 0.60, "unit")],
        "deployment": "a production search assistant",
        "costs": ["retrieval latency", "index size", "GPU memory", "the number of generated tokens"],
        "baselines": ["a BM25 retriever", "a closed-book model of the same size", "Fusion-in-Decoder", "REALM",
                      "the original RAG model", "a fine-tuned T5 reader"],
        "hard_cases": ["questions about rare entities", "questions that require more than two hops",
                       "queries whose answers changed after the index was built"],
        "limitations": ["the retriever must be re-indexed whenever the corpus changes",
                        "the gains depend on the quality of the underlying index",
                        "latency grows linearly with the number of retrieved passages"],
        "not_handles": ["resolve conflicts between contradictory passages", "handle questions without any supporting document",
                        "attribute answers that combine several sources"],
        "future": ["multilingual retrieval", "retrieval over tables and images", "end-to-end training at web scale"],
        "scope": ["English Wikipedia", "extractive answers", "a single retrieval round"],
        "units": "question-answer pairs",
        "data_sources": ["search engine logs", "community question-answering sites", "customer support tickets"],
    },
    {
        "slug": "wasm",
        "cross": ["efficiency", "robustness", "scalability", "benchmarking"],
        "file": "webassembly-sandboxing",
        "tag": "webassembly-sandboxing",
        "name": "WebAssembly sandboxing",
        "title_name": "WebAssembly Sandboxing",
        "years": (2017, 2026),
        "venues": ["arXiv", "USENIX Security", "PLDI", "OSDI", "EuroSys", "ASPLOS", "CCS", "OOPSLA"],
        "tasks": ["isolating untrusted plugins", "serverless function isolation", "sandboxing native libraries",
                  "edge computing", "running third-party extensions"],
        "system": "WebAssembly runtime",
        "prefixes": ["Iso", "Wall", "Cage", "Fence", "Vault", "Bastion", "Moat", "Keel", "Hull", "Lattice",
                     "Quill", "Shard"],
        "suffixes": ["Wasm", "Box", "Guard", "Run", "JIT", "Cell", "VM", "Link"],
        "problems": [
            "Running untrusted code next to sensitive data requires isolation that is both strong and cheap.",
            "Process-based isolation costs microseconds per context switch, which dominates short-lived serverless functions.",
            "WebAssembly promises memory-safe, portable execution, but its guarantees hold only if the compiler and runtime are correct.",
            "Software fault isolation has been studied for decades, e.g. by Wahbe et al., yet production runtimes still trade safety for speed.",
        ],
        "subthemes": [
            {"tag": "software-fault-isolation", "name": "software fault isolation",
             "title": "Low-Overhead Software Fault Isolation for {Task}",
             "mechanism": "enforces memory isolation with guard regions and bounds checks inserted at compile time",
             "mechanism2": "elides redundant bounds checks with a verified range analysis",
             "components": ["guard pages", "a verified bounds-check elimination pass", "segment-based addressing"],
             "benefit": "each sandbox costs little more than a function call"},
            {"tag": "capability-security", "name": "capability-based security",
             "title": "Capability-Based Access Control for {Task}",
             "mechanism": "grants each module only the capabilities named in its manifest",
             "mechanism2": "checks capability use at the host boundary with typed handles",
             "components": ["typed capability handles", "a manifest-driven linker", "the component model"],
             "benefit": "a compromised module cannot reach files or sockets it was not granted"},
            {"tag": "jit-compilation", "name": "JIT compilation",
             "title": "Verified Just-in-Time Compilation for {Task}",
             "mechanism": "compiles WebAssembly with a register-allocating baseline compiler validated per function",
             "mechanism2": "caches compiled code keyed by content hash across process restarts",
             "components": ["a translation validator", "a baseline compiler", "a content-addressed code cache"],
             "benefit": "cold starts drop without trusting a large optimising compiler"},
            {"tag": "side-channels", "name": "side-channel mitigation",
             "title": "Mitigating Spectre Side Channels in {Task}",
             "mechanism": "hardens generated code against speculative execution attacks with selective fences",
             "mechanism2": "partitions timers and shared memory so that sandboxes cannot build precise clocks",
             "components": ["speculative load hardening", "coarse-grained timers", "per-tenant memory partitions"],
             "benefit": "co-located tenants cannot read each other's secrets through microarchitectural state"},
            {"tag": "deterministic-execution", "name": "deterministic execution",
             "title": "Deterministic Replay of {Task}",
             "mechanism": "removes every source of nondeterminism and records host calls in a replay log",
             "mechanism2": "canonicalises NaN bit patterns and bounds execution with instruction fuel",
             "components": ["a host-call journal", "fuel-based preemption", "NaN canonicalisation"],
             "benefit": "any execution can be replayed bit for bit for debugging and auditing"},
        ],
        "datasets": ["SPEC CPU 2017", "PolyBench/C", "the Sightglass suite", "a corpus of npm packages",
                     "the WasmBench collection", "Lucet's benchmark set", "Fastly's production traces"],
        "metrics": [("throughput relative to native code", 62, 97, "pct"), ("requests per second per core", 4000, 60000, "int"),
                    ("fuzzing coverage", 40, 85, "pct"), ("sandboxes per host", 2000, 40000, "int")],
        "deployment": "a production edge platform",
        "costs": ["runtime overhead", "cold-start time", "memory per sandbox", "context-switch cost"],
        "baselines": ["process isolation", "V8's WebAssembly tier", "native execution", "gVisor",
                      "Firecracker microVMs", "Native Client"],
        "hard_cases": ["workloads that make frequent host calls", "programs with irregular memory access",
                       "modules larger than 50 MB"],
        "limitations": ["the trusted computing base still includes the host's system-call layer",
                        "the approach relies on 64-bit address spaces for its guard regions",
                        "modules compiled from languages with garbage collection pay extra overhead"],
        "not_handles": ["protect against denial of service through host resources", "support threads that share memory",
                        "cover attacks on the compiler itself"],
        "future": ["support for the threads proposal", "formal verification of the host interface", "hardware-assisted isolation"],
        "scope": ["x86-64 hosts", "single-threaded modules", "ahead-of-time compiled code"],
        "units": "WebAssembly modules",
        "data_sources": ["public package registries", "browser extensions", "production edge deployments"],
    },
    {
        "slug": "dwf",
        "cross": ["efficiency", "robustness", "scalability", "benchmarking"],
        "file": "durable-workflow-execution",
        "tag": "durable-workflow-execution",
        "name": "durable workflow execution",
        "title_name": "Durable Workflow Execution",
        "years": (2016, 2026),
        "venues": ["arXiv", "VLDB", "SIGMOD", "OSDI", "SOSP", "EuroSys", "Middleware", "CIDR"],
        "tasks": ["long-running business processes", "microservice orchestration", "data pipelines",
                  "serverless workflows", "agentic tool pipelines"],
        "system": "workflow engine",
        "prefixes": ["Dura", "Keep", "Relay", "Ledger", "Anvil", "Tether", "Ferry", "Beacon", "Helm", "Cairn",
                     "Orbit", "Pylon"],
        "suffixes": ["Flow", "Log", "Step", "Saga", "Chain", "DB", "Run", "Graph"],
        "problems": [
            "Long-running workflows must survive process crashes, deployments and network partitions without repeating side effects.",
            "Developers hand-roll retries, checkpoints and idempotency keys, and each ad hoc solution fails in its own way.",
            "Durable execution engines persist every step, but the write amplification limits their throughput.",
            "Sagas, first described by Garcia-Molina et al., compensate failed transactions, yet composing them with retries remains error-prone.",
        ],
        "subthemes": [
            {"tag": "checkpointing", "name": "checkpointing",
             "title": "Incremental Checkpointing for {Task}",
             "mechanism": "persists each step's output in a write-ahead log before acknowledging it",
             "mechanism2": "batches checkpoints of concurrent steps into a single fsync",
             "components": ["a write-ahead log", "group commit", "incremental state snapshots"],
             "benefit": "a crashed workflow resumes from its last completed step"},
            {"tag": "exactly-once", "name": "exactly-once semantics",
             "title": "Exactly-Once Side Effects in {Task}",
             "mechanism": "derives idempotency keys from the workflow history so that retried steps never repeat side effects",
             "mechanism2": "fences stale workers with monotonically increasing epochs",
             "components": ["deterministic idempotency keys", "epoch-based fencing", "an outbox table"],
             "benefit": "payments, emails and other external effects happen exactly once"},
            {"tag": "deterministic-replay", "name": "deterministic replay",
             "title": "Replay-Based Recovery for {Task}",
             "mechanism": "re-executes workflow code against a recorded event history to rebuild its state",
             "mechanism2": "detects nondeterministic code changes by comparing replayed commands with the history",
             "components": ["an event-sourced history", "a replay checker", "versioned workflow definitions"],
             "benefit": "workflow code can be written as ordinary sequential functions"},
            {"tag": "scheduling", "name": "step scheduling",
             "title": "Latency-Aware Scheduling of {Task}",
             "mechanism": "schedules ready steps on workers according to their estimated duration and deadline",
             "mechanism2": "co-locates steps that exchange large intermediate results",
             "components": ["a deadline-aware scheduler", "duration estimates from past runs", "locality hints"],
             "benefit": "end-to-end latency stays predictable under load"},
            {"tag": "compensation", "name": "compensation and sagas",
             "title": "Composable Compensation for {Task}",
             "mechanism": "attaches a compensating action to every step and runs them in reverse order on failure",
             "mechanism2": "checks statically that every side-effecting step has a compensation",
             "components": ["typed compensation handlers", "a static effect checker", "saga logs"],
             "benefit": "partial failures leave the system in a consistent state"},
        ],
        "datasets": ["the TPC-C benchmark", "Alibaba's microservice traces", "the Azure Functions trace",
                     "a production order-processing workload", "the DeathStarBench suite", "the YCSB benchmark"],
        "metrics": [("committed steps per second", 2000, 90000, "int"), ("goodput", 60, 97, "pct"),
                    ("completion rate under fault injection", 90, 99.9, "pct"), ("scheduler utilisation", 55, 95, "pct")],
        "deployment": "a production order pipeline",
        "costs": ["storage write amplification", "p99 latency", "recovery time", "the number of database round trips"],
        "baselines": ["Temporal", "AWS Step Functions", "Apache Airflow", "a hand-written retry loop",
                      "Azure Durable Functions", "a two-phase commit protocol"],
        "hard_cases": ["workflows with thousands of parallel branches", "steps that run for hours",
                       "clusters that lose a whole availability zone"],
        "limitations": ["workflow code must be deterministic, which developers find easy to violate",
                        "the log grows without bound unless histories are compacted",
                        "the evaluation uses a single storage backend"],
        "not_handles": ["migrate in-flight workflows across incompatible code versions",
                        "guarantee exactly-once effects for external systems without idempotency support",
                        "bound the cost of very long histories"],
        "future": ["geo-replicated execution", "automatic history compaction", "formal proofs of the recovery protocol"],
        "scope": ["a single region", "workflows written in one language", "stateless workers"],
        "units": "workflow executions",
        "data_sources": ["an e-commerce platform", "a bank's payment system", "a cloud provider's control plane"],
    },
    {
        "slug": "gnn",
        "cross": ["efficiency", "robustness", "scalability", "benchmarking", "interpretability"],
        "file": "graph-neural-networks",
        "tag": "graph-neural-networks",
        "name": "graph neural networks",
        "title_name": "Graph Neural Networks",
        "years": (2016, 2026),
        "venues": ["arXiv", "NeurIPS", "ICML", "ICLR", "KDD", "WWW", "AAAI", "LoG"],
        "tasks": ["node classification", "link prediction", "molecular property prediction",
                  "graph classification", "traffic prediction on road networks"],
        "system": "graph neural network",
        "prefixes": ["Graph", "Node", "Edge", "Hyper", "Spectra", "Walk", "Motif", "Orbit", "Sheaf", "Prism",
                     "Tangle", "Mesh"],
        "suffixes": ["GNN", "Conv", "Net", "Former", "Mixer", "Prop", "Pool", "SAGE"],
        "problems": [
            "Message-passing neural networks cannot distinguish graphs that the Weisfeiler-Lehman test cannot distinguish.",
            "Deep graph neural networks suffer from over-smoothing: node representations converge as layers are added.",
            "Training on graphs with billions of edges does not fit in accelerator memory.",
            "Graph convolutional networks in the style of Kipf et al. assume homophily, which many real graphs violate.",
        ],
        "subthemes": [
            {"tag": "over-smoothing", "problem": True, "name": "over-smoothing",
             "title": "Going Deeper with {Task} without Over-Smoothing",
             "mechanism": "adds residual connections and pairwise normalisation to every message-passing layer",
             "mechanism2": "keeps node representations apart with a contrastive regulariser",
             "components": ["pairwise normalisation", "initial residual connections", "a contrastive regulariser"],
             "benefit": "networks with 64 layers still improve over shallow ones"},
            {"tag": "graph-transformers", "name": "graph transformers",
             "title": "Graph Transformers for {Task}",
             "mechanism": "replaces local message passing with attention over all nodes plus structural encodings",
             "mechanism2": "encodes structure with Laplacian eigenvectors and random-walk probabilities",
             "components": ["Laplacian positional encodings", "global attention", "a sparse attention pattern"],
             "benefit": "long-range interactions are captured in a single layer"},
            {"tag": "scalable-training", "name": "scalable training",
             "title": "Scalable Training of {Task} Models on Billion-Edge Graphs",
             "mechanism": "samples subgraphs with a historical embedding cache to bound memory",
             "mechanism2": "partitions the graph across machines and overlaps communication with computation",
             "components": ["neighbour sampling", "a historical embedding cache", "graph partitioning"],
             "benefit": "training fits on a single GPU regardless of graph size"},
            {"tag": "heterophily", "problem": True, "name": "heterophily",
             "title": "Beyond Homophily in {Task}",
             "mechanism": "learns separate aggregation weights for similar and dissimilar neighbours",
             "mechanism2": "separates ego and neighbour embeddings before combining them",
             "components": ["signed message passing", "ego-neighbour separation", "higher-order neighbourhoods"],
             "benefit": "accuracy holds on graphs where neighbours tend to have different labels"},
            {"tag": "expressivity", "problem": True, "name": "expressive power",
             "title": "On the Expressive Power of Networks for {Task}",
             "mechanism": "augments message passing with subgraph counts that exceed the Weisfeiler-Lehman test",
             "mechanism2": "proves which substructures the architecture can count",
             "components": ["substructure counts", "higher-order message passing", "a theoretical expressivity hierarchy"],
             "benefit": "graphs that standard networks confuse are told apart"},
        ],
        "datasets": ["Cora", "Citeseer", "PubMed", "ogbn-arxiv", "ogbn-products", "ZINC", "QM9", "the Long Range Graph Benchmark"],
        "metrics": [("accuracy", 65, 92, "pct"), ("ROC-AUC", 0.70, 0.95, "unit"), ("macro-F1", 55, 88, "pct"),
                    ("Hits@50", 40, 80, "pct")],
        "deployment": "a production recommendation service",
        "costs": ["GPU memory", "training time per epoch", "inference latency", "the number of parameters"],
        "baselines": ["GCN", "GraphSAGE", "GAT", "GIN", "a multilayer perceptron that ignores edges", "APPNP"],
        "hard_cases": ["heterophilous graphs", "graphs with long-range dependencies", "nodes of very low degree"],
        "limitations": ["the structural encodings are expensive to precompute on large graphs",
                        "hyperparameters were tuned separately for each dataset",
                        "the theoretical results assume graphs without node features"],
        "not_handles": ["handle dynamic graphs whose edges change over time", "scale attention to graphs with millions of nodes",
                        "explain its predictions"],
        "future": ["temporal graphs", "self-supervised pre-training on graphs", "theoretical guarantees for the sampling scheme"],
        "scope": ["transductive node classification", "small molecular graphs", "static graphs"],
        "units": "labelled graphs",
        "data_sources": ["citation databases", "e-commerce co-purchase logs", "chemical compound libraries"],
    },
    {
        "slug": "prot",
        "cross": ["efficiency", "scalability", "benchmarking", "interpretability"],
        "file": "protein-structure-prediction",
        "tag": "protein-structure-prediction",
        "name": "protein structure prediction",
        "title_name": "Protein Structure Prediction",
        "years": (2016, 2026),
        "venues": ["bioRxiv", "Bioinformatics", "Nature Methods", "ISMB", "RECOMB", "NeurIPS", "PLOS Computational Biology", "arXiv"],
        "tasks": ["single-sequence structure prediction", "protein complex prediction", "protein design",
                  "antibody structure modelling", "mutation effect prediction"],
        "system": "structure predictor",
        "prefixes": ["Fold", "Helix", "Amino", "Coil", "Strand", "Rosa", "Pept", "Chiral", "Dock", "Sheet",
                     "Motif", "Tertia"],
        "suffixes": ["Fold", "Net", "Former", "Pred", "Dock", "Design", "ESM", "Struct"],
        "problems": [
            "Predicting a protein's three-dimensional structure from its sequence was a grand challenge of biology for fifty years.",
            "Structure predictors rely on multiple sequence alignments, which are slow to build and uninformative for orphan proteins.",
            "Protein complexes, not single chains, carry out most cellular functions, yet they remain hard to model.",
            "Since Jumper et al. reported near-experimental accuracy, the open question has shifted to speed, complexes and design.",
        ],
        "subthemes": [
            {"tag": "language-models", "name": "protein language models",
             "title": "Protein Language Models for {Task}",
             "mechanism": "predicts structure from the embeddings of a protein language model trained on 250 million sequences",
             "mechanism2": "replaces the multiple sequence alignment with attention maps of the language model",
             "components": ["a masked protein language model", "a structure module", "attention-derived contact maps"],
             "benefit": "structures are predicted in seconds without an alignment"},
            {"tag": "msa", "name": "multiple sequence alignments",
             "title": "Faster Alignments for {Task}",
             "mechanism": "builds multiple sequence alignments with GPU-accelerated profile search",
             "mechanism2": "subsamples alignments to expose alternative conformations",
             "components": ["GPU profile search", "alignment subsampling", "coevolution features"],
             "benefit": "alignment construction stops being the bottleneck"},
            {"tag": "complexes", "name": "protein complexes",
             "title": "Modelling Protein Complexes for {Task}",
             "mechanism": "pairs alignments across chains and predicts inter-chain contacts jointly",
             "mechanism2": "scores candidate interfaces with a learned confidence head",
             "components": ["paired alignments", "an interface confidence head", "multimer templates"],
             "benefit": "interfaces between chains are modelled as accurately as the chains themselves"},
            {"tag": "protein-design", "name": "protein design",
             "title": "Diffusion-Based {Task}",
             "mechanism": "generates backbones with a denoising diffusion model and designs sequences that fold onto them",
             "mechanism2": "filters designs by refolding them with an independent predictor",
             "components": ["a backbone diffusion model", "inverse folding", "in silico refolding filters"],
             "benefit": "designed proteins fold as intended in the laboratory"},
            {"tag": "confidence-estimation", "name": "confidence estimation",
             "title": "Calibrated Confidence for {Task}",
             "mechanism": "predicts per-residue error estimates alongside the structure",
             "mechanism2": "calibrates confidence scores against experimental structures released after training",
             "components": ["a per-residue error head", "temperature calibration", "time-split evaluation"],
             "benefit": "users know which regions of a model to trust"},
        ],
        "datasets": ["CASP15 targets", "CAMEO", "the Protein Data Bank", "CATH domains", "SAbDab antibodies",
                     "the ProteinGym benchmark", "UniRef50"],
        "metrics": [("TM-score", 0.60, 0.92, "unit"), ("lDDT", 65, 90, "pct"), ("DockQ success rate", 30, 75, "pct"),
                    ("design success rate", 10, 60, "pct"), ("Spearman correlation", 0.40, 0.70, "unit")],
        "deployment": "a blind prospective assessment",
        "costs": ["inference time", "GPU memory", "alignment search time", "the cost of laboratory validation"],
        "baselines": ["AlphaFold2", "RoseTTAFold", "ESMFold", "trRosetta", "homology modelling", "Rosetta energy minimisation"],
        "hard_cases": ["orphan proteins with few homologues", "intrinsically disordered regions",
                       "antibody complementarity-determining loops"],
        "limitations": ["predicted structures are static and miss conformational dynamics",
                        "accuracy drops for proteins unlike those in the training set",
                        "laboratory validation covered only a small number of designs"],
        "not_handles": ["model ligands, ions or post-translational modifications", "predict the effect of the cellular environment",
                        "capture alternative conformations reliably"],
        "future": ["modelling protein dynamics", "joint modelling of nucleic acids", "closing the loop with automated laboratories"],
        "scope": ["single-domain proteins", "soluble proteins", "monomeric targets"],
        "units": "protein sequences",
        "data_sources": ["the Protein Data Bank", "metagenomic sequencing projects", "deep mutational scanning studies"],
    },
    {
        "slug": "fl",
        "cross": ["privacy", "efficiency", "robustness", "scalability", "benchmarking"],
        "file": "federated-learning",
        "tag": "federated-learning",
        "name": "federated learning",
        "title_name": "Federated Learning",
        "years": (2017, 2026),
        "venues": ["arXiv", "NeurIPS", "ICML", "MLSys", "IEEE S&P", "AISTATS", "CCS", "ICLR"],
        "tasks": ["next-word prediction on mobile keyboards", "medical image segmentation across hospitals",
                  "cross-silo fraud detection", "on-device speech recognition", "federated recommendation"],
        "system": "federated learning system",
        "prefixes": ["Fed", "Silo", "Swarm", "Hive", "Edge", "Mosaic", "Quorum", "Ripple", "Stitch", "Harbor",
                     "Kite", "Cohort"],
        "suffixes": ["Avg", "Prox", "Opt", "Sec", "Guard", "Agg", "Lite", "Sync"],
        "problems": [
            "Federated learning trains a shared model without collecting raw data, but clients hold very different data distributions.",
            "Communication between clients and the server, not computation, is the bottleneck of cross-device training.",
            "Model updates leak information about the training data unless they are protected.",
            "Federated averaging as introduced by McMahan et al. converges slowly when client data are not identically distributed.",
        ],
        "subthemes": [
            {"tag": "non-iid", "problem": True, "name": "heterogeneous client data",
             "title": "Handling Non-IID Data in {Task}",
             "mechanism": "corrects client drift with control variates that track the difference between local and global updates",
             "mechanism2": "clusters clients with similar data and trains one model per cluster",
             "components": ["control variates", "client clustering", "a proximal regulariser"],
             "benefit": "training converges even when every client sees different labels"},
            {"tag": "differential-privacy", "name": "differential privacy",
             "title": "Differentially Private {Task}",
             "mechanism": "clips and noises client updates to give user-level differential privacy",
             "mechanism2": "tunes the clipping norm adaptively from a private quantile estimate",
             "components": ["user-level DP-SGD", "adaptive clipping", "a privacy accountant"],
             "benefit": "no single user's data can be inferred from the trained model"},
            {"tag": "secure-aggregation", "name": "secure aggregation",
             "title": "Efficient Secure Aggregation for {Task}",
             "mechanism": "masks each update so that the server learns only the sum of client updates",
             "mechanism2": "tolerates client dropouts with threshold secret sharing",
             "components": ["pairwise masking", "threshold secret sharing", "a sparse communication graph"],
             "benefit": "the server never sees an individual client's update"},
            {"tag": "communication-efficiency", "name": "communication efficiency",
             "title": "Communication-Efficient {Task}",
             "mechanism": "compresses updates with quantisation and error feedback",
             "mechanism2": "lets clients perform more local steps between synchronisation rounds",
             "components": ["8-bit quantisation", "error feedback", "adaptive local steps"],
             "benefit": "clients on slow networks can still participate"},
            {"tag": "personalization", "name": "personalisation",
             "title": "Personalised Models for {Task}",
             "mechanism": "splits the model into shared layers and a personal head fine-tuned on each client",
             "mechanism2": "meta-learns an initialisation that adapts to a new client in a few steps",
             "components": ["a personal prediction head", "meta-learned initialisation", "local fine-tuning"],
             "benefit": "each client gets a model that fits its own data"},
        ],
        "datasets": ["FEMNIST", "the LEAF benchmark", "CIFAR-10 with Dirichlet partitions", "Shakespeare",
                     "StackOverflow", "the FLamby medical benchmark", "FedScale"],
        "metrics": [("accuracy", 60, 90, "pct"), ("worst-client accuracy", 35, 75, "pct"),
                    ("next-word recall", 15, 35, "pct"), ("Dice score", 0.70, 0.90, "unit")],
        "deployment": "a live deployment on 10,000 phones",
        "costs": ["communication per round", "client energy use", "the number of training rounds", "server computation"],
        "baselines": ["FedAvg", "FedProx", "SCAFFOLD", "centralised training on pooled data", "local training alone",
                      "FedNova"],
        "hard_cases": ["clients with fewer than ten examples", "highly skewed label distributions",
                       "rounds in which half of the clients drop out"],
        "limitations": ["the privacy guarantee weakens when the same clients participate in many rounds",
                        "the simulation assumes that clients are always reachable",
                        "the extra computation may drain the batteries of low-end phones"],
        "not_handles": ["defend against colluding malicious clients", "handle clients that join after training has started",
                        "guarantee fairness across client groups"],
        "future": ["asynchronous aggregation", "robustness to poisoning attacks", "federated training of large language models"],
        "scope": ["simulated clients", "image classification", "cross-silo settings with few clients"],
        "units": "user sessions",
        "data_sources": ["a deployed mobile keyboard", "partner hospitals", "regional bank branches"],
    },
    {
        "slug": "llme",
        "cross": ["robustness", "benchmarking", "interpretability", "efficiency"],
        "file": "llm-evaluation",
        "tag": "llm-evaluation",
        "name": "LLM evaluation",
        "title_name": "LLM Evaluation",
        "years": (2020, 2026),
        "venues": ["arXiv", "ACL", "EMNLP", "NeurIPS Datasets and Benchmarks", "ICLR", "COLM", "TACL", "FAccT"],
        "tasks": ["evaluating open-ended generation", "measuring factual accuracy", "evaluating code generation",
                  "assessing reasoning", "red-teaming chat assistants"],
        "system": "evaluation framework",
        "prefixes": ["Judge", "Probe", "Gauge", "Rubric", "Scope", "Arena", "Ledger", "Sieve", "Litmus", "Tally",
                     "Verdict", "Audit"],
        "suffixes": ["Eval", "Bench", "Score", "Check", "Test", "Metric", "Arena", "Suite"],
        "problems": [
            "Static benchmarks saturate quickly and leak into the pretraining data of the models they evaluate.",
            "Human evaluation of open-ended generation is slow, expensive and hard to reproduce.",
            "Leaderboards rank models on aggregate scores that hide large differences across tasks and user groups.",
            "Using a language model as a judge, as popularised by Zheng et al., is cheap but inherits the judge's biases.",
        ],
        "subthemes": [
            {"tag": "llm-as-judge", "name": "LLM-as-a-judge",
             "title": "Can Language Models Judge {Task}?",
             "mechanism": "uses a strong language model to grade responses against a rubric",
             "mechanism2": "swaps the order of candidate answers to cancel position bias",
             "components": ["rubric-based grading prompts", "position swapping", "a panel of judge models"],
             "benefit": "automatic grades track expert judgements closely"},
            {"tag": "contamination", "problem": True, "name": "benchmark contamination",
             "title": "Detecting Benchmark Contamination in {Task}",
             "mechanism": "detects test items that appear in pretraining data with n-gram and perplexity probes",
             "mechanism2": "rewrites contaminated items into semantically equivalent fresh variants",
             "components": ["n-gram overlap probes", "perplexity-based membership tests", "paraphrased test sets"],
             "benefit": "reported scores reflect generalisation rather than memorisation"},
            {"tag": "human-evaluation", "name": "human evaluation",
             "title": "Reliable Human Evaluation for {Task}",
             "mechanism": "collects pairwise preferences from trained annotators with attention checks",
             "mechanism2": "fits a Bradley-Terry model to pairwise preferences to rank systems",
             "components": ["pairwise preference collection", "a Bradley-Terry ranking model", "annotator agreement analysis"],
             "benefit": "rankings are stable across annotator pools"},
            {"tag": "robustness-testing", "name": "robustness testing",
             "title": "Stress-Testing Models for {Task}",
             "mechanism": "perturbs prompts with paraphrases, typos and distractors to measure robustness",
             "mechanism2": "generates adversarial prompts with a red-teaming model",
             "components": ["prompt perturbations", "an automated red-teaming model", "consistency metrics"],
             "benefit": "brittle behaviour is found before deployment"},
            {"tag": "calibration", "name": "calibration",
             "title": "Are Models Calibrated on {Task}?",
             "mechanism": "measures whether the model's stated confidence matches its accuracy",
             "mechanism2": "elicits verbal confidence and compares it with token probabilities",
             "components": ["expected calibration error", "verbalised confidence", "selective prediction curves"],
             "benefit": "users can decide when to trust an answer"},
        ],
        "datasets": ["MMLU", "HumanEval", "GSM8K", "TruthfulQA", "MT-Bench", "BIG-bench", "HELM scenarios", "Chatbot Arena logs"],
        "metrics": [("agreement with human raters", 60, 90, "pct"), ("accuracy", 40, 88, "pct"),
                    ("Kendall's tau", 0.50, 0.85, "unit"), ("contamination detection F1", 60, 92, "pct")],
        "deployment": "a shadow evaluation of a production assistant",
        "costs": ["evaluation cost", "annotation time", "the number of judge calls", "compute per benchmark run"],
        "baselines": ["exact-match scoring", "BLEU and ROUGE", "crowd-sourced ratings", "a single judge model",
                      "GPT-4 as a judge", "static leaderboards"],
        "hard_cases": ["long-form answers", "non-English prompts", "questions with several acceptable answers"],
        "limitations": ["judge models prefer longer answers even when instructed otherwise",
                        "our annotator pool is small and mostly English-speaking",
                        "contamination detection needs access to the pretraining corpus"],
        "not_handles": ["evaluate multi-turn agentic behaviour", "measure harms that emerge only after deployment",
                        "separate model quality from prompt quality"],
        "future": ["dynamic benchmarks that refresh automatically", "evaluation of tool-using agents", "multilingual judging"],
        "scope": ["English prompts", "single-turn interactions", "publicly available models"],
        "units": "annotated model responses",
        "data_sources": ["a public chat arena", "expert annotators", "crowd workers"],
    },
    {
        "slug": "tsf",
        "cross": ["efficiency", "robustness", "scalability", "benchmarking", "interpretability"],
        "file": "time-series-forecasting",
        "tag": "time-series-forecasting",
        "name": "time-series forecasting",
        "title_name": "Time-Series Forecasting",
        "years": (2016, 2026),
        "venues": ["arXiv", "NeurIPS", "ICML", "KDD", "AAAI", "International Journal of Forecasting", "ICLR", "VLDB"],
        "tasks": ["electricity load forecasting", "traffic forecasting", "retail demand forecasting",
                  "weather forecasting", "forecasting cloud resource usage"],
        "system": "forecasting model",
        "prefixes": ["Chrono", "Tempo", "Horizon", "Season", "Trend", "Pulse", "Tide", "Epoch", "Cadence", "Drift",
                     "Lag", "Patch"],
        "suffixes": ["Net", "Former", "Cast", "Mixer", "TS", "Flow", "Linear", "GPT"],
        "problems": [
            "Forecasting many related time series requires models that share information without washing out local patterns.",
            "Transformer forecasters have been questioned after simple linear models matched them on long-horizon benchmarks.",
            "Decision makers need calibrated uncertainty, not only point forecasts.",
            "Classical methods such as the exponential smoothing of Hyndman et al. remain hard to beat on short series.",
        ],
        "subthemes": [
            {"tag": "transformers", "name": "transformer forecasters",
             "title": "Patch-Based Transformers for {Task}",
             "mechanism": "splits each series into patches and applies channel-independent attention",
             "mechanism2": "normalises each input window to remove level shifts before attention",
             "components": ["patch embeddings", "channel independence", "reversible instance normalisation"],
             "benefit": "long look-back windows become affordable"},
            {"tag": "probabilistic-forecasting", "name": "probabilistic forecasting",
             "title": "Probabilistic {Task} with Diffusion Models",
             "mechanism": "models the joint distribution of future values with a conditional diffusion model",
             "mechanism2": "produces quantile forecasts trained with the continuous ranked probability score",
             "components": ["a conditional diffusion model", "quantile regression heads", "the CRPS loss"],
             "benefit": "forecasts come with calibrated prediction intervals"},
            {"tag": "foundation-models", "name": "forecasting foundation models",
             "title": "A Foundation Model for {Task}",
             "mechanism": "pretrains a single model on billions of time points from many domains and forecasts new series zero-shot",
             "mechanism2": "tokenises values by scaling and quantisation so that a language-model architecture can be reused",
             "components": ["large-scale pretraining", "value tokenisation", "zero-shot inference"],
             "benefit": "new series can be forecast without any training"},
            {"tag": "anomaly-detection", "name": "anomaly detection",
             "title": "Forecast-Based Anomaly Detection for {Task}",
             "mechanism": "flags anomalies where observations fall outside the forecast distribution",
             "mechanism2": "adapts thresholds online as the series drifts",
             "components": ["forecast residuals", "online threshold adaptation", "a drift detector"],
             "benefit": "alerts stay precise while the data evolve"},
            {"tag": "hierarchical-forecasting", "name": "hierarchical forecasting",
             "title": "Coherent Hierarchical {Task}",
             "mechanism": "reconciles forecasts across levels of a hierarchy so that they sum consistently",
             "mechanism2": "learns the reconciliation end to end with the base forecaster",
             "components": ["a reconciliation layer", "bottom-up aggregation", "trace minimisation"],
             "benefit": "store-level and region-level forecasts agree"},
        ],
        "datasets": ["the ETT datasets", "the M4 competition data", "the M5 competition data", "the Electricity dataset",
                     "the Traffic dataset", "the Weather dataset", "the Monash archive"],
        "metrics": [("forecast skill score", 0.10, 0.45, "unit"), ("prediction-interval coverage", 80, 95, "pct"),
                    ("F1 for anomaly detection", 60, 92, "pct"), ("accuracy within a 5% tolerance", 55, 85, "pct")],
        "deployment": "a live deployment at an electricity utility",
        "costs": ["mean squared error", "MASE", "training time", "inference latency", "the number of parameters"],
        "baselines": ["DLinear", "N-BEATS", "DeepAR", "ARIMA", "exponential smoothing", "Informer"],
        "hard_cases": ["series with structural breaks", "intermittent demand with many zeros", "horizons longer than 720 steps"],
        "limitations": ["the model assumes regularly sampled series without missing values",
                        "pretraining data may overlap with some evaluation series",
                        "the benchmarks used are small relative to industrial workloads"],
        "not_handles": ["use exogenous covariates such as prices or holidays", "adapt to abrupt regime changes",
                        "explain individual forecasts"],
        "future": ["irregularly sampled series", "causal covariates", "online adaptation under drift"],
        "scope": ["univariate series", "hourly data", "public benchmarks"],
        "units": "time series",
        "data_sources": ["smart meters", "retail point-of-sale systems", "cloud monitoring"],
    },
]

# A few hand-written papers: the only ones about tokamaks (a query that finds
# fewer than three papers), and awkward punctuation for the sentence splitter.
HANDWRITTEN = [
    {
        "topic": "tsf", "subtheme": "anomaly-detection", "cross": "robustness",
        "title": "Forecasting Tokamak Plasma Disruptions with Recurrent Networks",
        "abstract": (
            "Disruptions abruptly terminate tokamak plasma discharges and can damage the vessel. "
            "We propose a recurrent forecasting model that predicts the time to disruption from magnetic and bolometer signals. "
            "The model is trained on 4,812 discharges from two devices (e.g. those with tungsten walls) and evaluated on held-out campaigns. "
            "Both signal families are resampled to 1 kHz, and the network is a two-layer recurrent model with 128 units per layer. "
            "Results show that it warns 213 ms before the disruption on average, with a false-alarm rate of 4.1%. "
            "It outperforms the threshold-based alarm used in operation by 17 percentage points of recall. "
            "However, the model does not transfer to a third device without retraining, and its warning time shrinks for density-limit disruptions. "
            "We release the preprocessing code so that other groups can repeat the study on their own devices."
        ),
    },
    {
        "topic": "tsf", "subtheme": "probabilistic-forecasting", "cross": "interpretability",
        "title": "Probabilistic Early Warning of Tokamak Disruptions",
        "abstract": (
            "Machine-protection systems in fusion devices need forecasts of plasma disruption risk with honest uncertainty. "
            "This paper introduces a probabilistic forecaster that outputs the hazard of a disruption over the next 300 ms. "
            "We use a survival-analysis loss on top of a temporal convolutional network, following the setup of Kates-Harbeck et al. with minor changes. "
            "The evaluation uses a corpus of 9,106 discharges, i.e. every shot of three experimental campaigns. "
            "Our forecaster improves the area under the warning-time curve from 0.81 to 0.89 and is well calibrated (expected calibration error 0.03). "
            "At a fixed false-alarm rate of 5%, it detects 91.4% of disruptions at least 30 ms in advance, which is enough time for mitigation. "
            "A limitation is that labels for disruption causes are noisy, so the per-cause analysis is only indicative."
        ),
    },
]

ADJECTIVES = ["simple", "scalable", "principled", "lightweight", "modular", "general", "practical", "unified"]
APPROACH_NOUNS = ["framework", "method", "approach", "technique", "system", "architecture"]


def title_case_task(task):
    small = {"a", "an", "the", "of", "on", "in", "for", "and", "with", "to", "across"}
    words = task.split(" ")
    out = []
    for i, w in enumerate(words):
        if i > 0 and w in small:
            out.append(w)
        else:
            out.append("-".join(part[:1].upper() + part[1:] for part in w.split("-")))
    return " ".join(out)


def article(noun):
    """`a` or `an` for `noun`, by its first sound."""
    word = noun.split(" ", 1)[0].split("-", 1)[0]
    if word[:1].isdigit():
        return "an" if word.startswith(("8", "11.", "18.")) or word in ("11", "18") else "a"
    if any(c.isupper() for c in word[1:]) or (word[:1].isupper() and word[1:].isdigit()):
        # An acronym, read letter by letter: "an F1", "an lDDT", "a TM-score".
        return "an" if word[0].lower() in "aefhilmnorsx" else "a"
    if word.lower().startswith(("uni", "use", "usu")):
        return "a"
    return "an" if word[:1].lower() in "aeiou" else "a"


class PaperGen:
    def __init__(self, rng, topic):
        self.rng = rng
        self.t = topic
        self.used_names = set()

    def pick(self, xs, k=None):
        if k is None:
            return self.rng.choice(xs)
        return self.rng.sample(xs, k)

    def method_name(self):
        for _ in range(1000):
            name = self.pick(self.t["prefixes"]) + self.pick(self.t["suffixes"])
            if self.rng.random() < 0.2:
                name += "-" + self.pick(["2", "XL", "Lite", "Pro", "v2"])
            if name not in self.used_names:
                self.used_names.add(name)
                return name
        raise RuntimeError("ran out of method names")

    def value(self, lo, hi, kind):
        """A value of a metric, formatted in its unit."""
        v = self.rng.uniform(lo, hi)
        if kind == "int":
            return f"{int(v):,}"
        if kind == "unit":
            return f"{v:.2f}"
        return f"{v:.1f}%"

    def metric(self):
        name, lo, hi, kind = self.pick(self.t["metrics"])
        return name, self.value(lo, hi, kind), (lo, hi, kind)

    def rise(self, spec):
        """Two values of a metric, the second better: `a`, `b`."""
        lo, hi, kind = spec
        a = self.rng.uniform(lo, lo + (hi - lo) * 0.6)
        b = a + (hi - a) * self.rng.uniform(0.15, 0.6)
        return self.value(a, a, kind), self.value(b, b, kind)

    def delta(self, spec=None):
        """An improvement: absolute in the metric's unit, or relative."""
        kind = spec[2] if spec else None
        if kind == "unit" and self.rng.random() < 0.6:
            return f"{self.rng.uniform(0.01, 0.09):.2f}"
        if kind == "pct" and self.rng.random() < 0.55:
            return f"{self.rng.uniform(0.8, 9.5):.1f} points"
        return f"{self.rng.uniform(2, 38):.1f}%"

    def authors(self):
        n = self.rng.choice([2, 3, 3, 4, 4, 5, 6])
        names = []
        while len(names) < n:
            name = f"{self.pick(FIRST_NAMES)} {self.pick(LAST_NAMES)}"
            if name not in names:
                names.append(name)
        return names

    def published(self):
        lo, hi = self.t["years"]
        year = self.rng.randint(lo, hi)
        month = self.rng.randint(1, 12)
        day = self.rng.randint(1, 28)
        if year == 2026:
            month = min(month, 5)
        return f"{year:04d}-{month:02d}-{day:02d}", year

    # --- sentences ---------------------------------------------------------

    def contribution(self, m, sub, task):
        t = self.t
        r = self.rng.randrange(8)
        adj = self.pick(ADJECTIVES)
        noun = self.pick(APPROACH_NOUNS)
        if r == 0:
            return f"We propose {m}, {article(adj)} {adj} {noun} for {task} that {sub['mechanism']}."
        if r == 1:
            return f"This paper introduces {m}, which {sub['mechanism']} so that {sub['benefit']}."
        if r == 2:
            c1, c2 = self.pick(sub["components"], 2)
            return f"In this work, we present {m}, {article(t['system'])} {t['system']} that combines {c1} with {c2}."
        if r == 3:
            return f"We introduce {m} for {task}: it {sub['mechanism']}."
        if r == 4:
            return f"Our main contribution is {m}, {article(adj)} {adj} {noun} that {sub['mechanism']}."
        if r == 5:
            return f"We study {sub['name']} in {task} and present {m}, which {sub['mechanism']}."
        if r == 6:
            focus = "designed to address" if sub.get("problem") else "built around"
            return f"This paper presents {m}, the first {t['system']} for {task} {focus} {sub['name']}."
        return f"We design {m}, {article(noun)} {noun} that {sub['mechanism']}, and release it as open source."

    def method(self, m, sub):
        """How the work is done, from the subtopic's second mechanism."""
        t = self.t
        r = self.rng.randrange(6)
        base = self.pick(t["baselines"])
        # A component the mechanism does not already name.
        c = self.pick([c for c in sub["components"] if c.split()[-1] not in sub["mechanism2"]] or sub["components"])
        if r == 0:
            return f"Concretely, {m} {sub['mechanism2']}."
        if r == 1:
            return f"The approach uses {c} and {sub['mechanism2']}."
        if r == 2:
            return f"Our method {sub['mechanism2']}, without changing the rest of the pipeline."
        if r == 3:
            return f"To achieve this, the system {sub['mechanism2']}; {c} then handles the remaining cases."
        if r == 4:
            return f"We use {c} as the core building block, and {m} {sub['mechanism2']}."
        return f"Unlike {base}, the method {sub['mechanism2']}."

    def protocol(self, m, sub):
        """How the work is trained or evaluated."""
        t = self.t
        r = self.rng.randrange(5)
        base = self.pick(t["baselines"])
        c = self.pick(sub["components"])
        if r == 0:
            return f"We build {m} on open-source components and evaluate it against {base} under identical budgets."
        if r == 1:
            return f"Following the protocol of {self.pick(LAST_NAMES)} et al., we evaluate {m} with {c} as the only change to the baseline pipeline."
        if r == 2:
            return f"We evaluate the design with ablations that remove {c} and replace it with the corresponding part of {base}."
        if r == 3:
            return f"All hyperparameters are tuned on validation data, and each configuration is trained with three random seeds."
        return f"We implement {m} in about {self.rng.randint(2, 15)},000 lines of code and evaluate it against {base}."

    def data(self, m, task):
        t = self.t
        r = self.rng.randrange(6)
        ds = self.pick(t["datasets"], 3)
        if r == 0:
            return f"We evaluate on {ds[0]}, {ds[1]} and {ds[2]}."
        if r == 1:
            return f"Experiments cover {self.rng.randint(3, 9)} benchmarks, including {ds[0]} and {ds[1]}."
        if r == 2:
            n = f"{self.rng.randint(2, 95)},{self.rng.randint(100, 999)}"
            return f"We also release a new dataset of {n} {t['units']} collected from {self.pick(t['data_sources'])}."
        if r == 3:
            return f"Our evaluation uses {ds[0]} together with {t['units']} drawn from {self.pick(t['data_sources'])}."
        if r == 4:
            return f"We report results on {ds[0]} and {ds[1]}, the standard benchmarks for {task}."
        return f"All experiments use public data ({ds[0]}, {ds[1]}), i.e. no proprietary benchmark is needed."

    def result(self, m, sub, used):
        t = self.t
        r = self.rng.choice([i for i in range(11) if i not in used])
        used.add(r)
        base = self.pick(t["baselines"])
        ds = self.pick(t["datasets"])
        metric, value, spec = self.metric()
        cost = self.pick(t["costs"])
        if r == 0:
            return f"Results show that {m} improves {metric} by {self.delta(spec)} over {base} on {ds}."
        if r == 1:
            return f"{m} outperforms {base} on {ds}, reaching {article(metric)} {metric} of {value}."
        if r == 2:
            return f"On {ds}, it reduces {cost} by {self.rng.uniform(12, 80):.1f}% while matching the {metric} of {base}."
        if r == 3:
            x = f"{self.rng.uniform(1.4, 8.0):.1f}x"
            return f"Compared with {base}, our approach achieves {article(x)} {x} reduction in {cost} at equal {metric}."
        if r == 4:
            return f"Across all benchmarks, {m} improves {metric} by {self.rng.uniform(2, 25):.1f}% on average."
        if r == 5:
            a, b = self.rise(spec)
            return f"The gains are largest on {self.pick(t['hard_cases'])}, where {metric} rises from {a} to {b}."
        if r == 6:
            return f"Ablations show that every component matters, with the largest drop ({self.delta(spec)} of {metric}) when we remove {self.pick(sub['components'])}."
        if r == 7:
            return f"We find that {m} reaches {article(metric)} {metric} of {value} on {ds}, {self.delta(spec)} above the strongest published result."
        if r == 8:
            x = f"{self.rng.uniform(5, 60):.1f}%"
            return f"Our experiments demonstrate {article(x)} {x} reduction in {cost} compared with {base}."
        if r == 9:
            a, b = self.rise(spec)
            return f"{m} raises {metric} from {a} to {b} on {ds} and is {self.rng.uniform(1.2, 4.0):.1f}x faster than {base}."
        return f"In {t['deployment']}, {m} increased {metric} by {self.delta(spec)} without any regression in {cost}."

    def limitation(self, m, used):
        t = self.t
        # Templates drawing on the same phrase list are used at most once.
        groups = [{0, 1, 4}, {2, 5}, {3, 6}]
        taken = set().union(*(g for g in groups if g & used))
        r = self.rng.choice([i for i in range(7) if i not in taken])
        used.add(r)
        if r == 0:
            return f"However, {self.pick(t['limitations'])}."
        if r == 1:
            return f"A limitation of our study is that {self.pick(t['limitations'])}."
        if r == 2:
            return f"The method does not {self.pick(t['not_handles'])}, and we leave {self.pick(t['future'])} to future work."
        if r == 3:
            return f"We only evaluate {self.pick(t['scope'])}, so it remains unclear whether the results generalise."
        if r == 4:
            return f"Gains are smaller on {self.pick(t['hard_cases'])}, which suggests that {self.pick(t['limitations'])}."
        if r == 5:
            return f"{m} cannot yet {self.pick(t['not_handles'])}."
        return f"Our analysis is limited to {self.pick(t['scope'])}; we leave {self.pick(t['future'])} for future work."

    def closing(self, m, sub):
        r = self.rng.randrange(4)
        if r == 0:
            return "Code and data are available to reproduce all experiments."
        if r == 1:
            return f"These results suggest that work on {sub['name']} deserves more attention in {self.t['name']}."
        if r == 2:
            return f"We discuss how {m} can be combined with {self.pick(self.t['baselines'])} in practice."
        return f"Overall, the study shows that careful attention to {sub['name']} pays off in practice."

    def title(self, m, sub, task):
        r = self.rng.randrange(6)
        Task = title_case_task(task)
        if r == 0:
            return f"{m}: {sub['title'].format(Task=Task)}"
        if r == 1:
            return sub["title"].format(Task=Task)
        if r == 2:
            return f"{m}: A {self.pick(['Practical', 'Scalable', 'Reliable', 'Principled', 'Unified'])} Approach to {title_case_task(sub['name'])} in {Task}"
        if r == 3:
            return f"A Closer Look at {title_case_task(sub['name'])} in {Task}"
        if r == 4:
            return f"Rethinking {title_case_task(sub['name'])} for {Task}"
        return f"{m}: {title_case_task(sub['name'])} at Scale"

    def abstract(self, m, sub, task, cross):
        parts = []
        if self.rng.random() < 0.75:
            parts.append(self.pick(self.t["problems"]))
        parts.append(self.contribution(m, sub, task))
        parts.append(self.method(m, sub))
        if self.rng.random() < 0.5:
            parts.append(self.protocol(m, sub))
        if cross:
            parts.append(
                self.pick(CROSS_THEMES[cross]).format(
                    cost=self.pick(self.t["costs"]), hard_case=self.pick(self.t["hard_cases"])
                )
            )
        parts.append(self.data(m, task))
        used = set()
        for _ in range(self.rng.choice([2, 2, 3])):
            parts.append(self.result(m, sub, used))
        used = set()
        parts.append(self.limitation(m, used))
        if self.rng.random() < 0.4:
            parts.append(self.limitation(m, used))
        if self.rng.random() < 0.5:
            parts.append(self.closing(m, sub))
        # Drop exact duplicate sentences, keep order.
        seen, unique = set(), []
        for p in parts:
            if p not in seen:
                seen.add(p)
                unique.append(p)
        return unique


def word_count(sentences):
    return sum(len(s.split()) for s in sentences)


def make_topic(rng, topic, start_index):
    gen = PaperGen(rng, topic)
    papers = []
    subthemes = topic["subthemes"]
    for i in range(PAPERS_PER_TOPIC):
        sub = subthemes[i % len(subthemes)]
        task = gen.pick(topic["tasks"])
        cross = gen.pick(topic["cross"]) if rng.random() < 0.55 else None
        m = gen.method_name()
        for _ in range(50):
            sentences = gen.abstract(m, sub, task, cross)
            if 120 <= word_count(sentences) <= 250:
                break
        else:
            raise RuntimeError(f"cannot make an abstract of the right length for {topic['slug']}")
        published, year = gen.published()
        topics = [topic["tag"], sub["tag"]]
        if cross:
            topics.append(cross)
        papers.append({
            "id": f"{topic['slug']}-{start_index + i:04d}",
            "title": gen.title(m, sub, task),
            "authors": gen.authors(),
            "abstract": " ".join(sentences),
            "url": None,  # set below from the id
            "source": gen.pick(topic["venues"]),
            "published": published,
            "year": year,
            "topics": topics,
        })
    for extra in HANDWRITTEN:
        if extra["topic"] != topic["slug"]:
            continue
        published, year = gen.published()
        papers.append({
            "id": f"{topic['slug']}-{start_index + len(papers):04d}",
            "title": extra["title"],
            "authors": gen.authors(),
            "abstract": extra["abstract"],
            "url": None,
            "source": gen.pick(topic["venues"]),
            "published": published,
            "year": year,
            "topics": [topic["tag"], extra["subtheme"], extra["cross"]],
        })
    for p in papers:
        p["url"] = f"https://papers.example.org/{p['id']}"
    return papers


# Records broken on purpose, so that validation matters: (id, how).
BROKEN = [
    ("rag-0004", "no-url"), ("rag-0017", "empty-abstract"),
    ("wasm-0009", "empty-url"), ("dwf-0012", "no-url"),
    ("gnn-0021", "empty-abstract"), ("prot-0006", "no-url"),
    ("fl-0014", "empty-title"), ("llme-0002", "no-url"),
    ("llme-0023", "empty-abstract"), ("tsf-0019", "empty-url"),
]


def break_records(papers):
    by_id = {p["id"]: p for p in papers}
    for pid, how in BROKEN:
        p = by_id[pid]
        if how == "no-url":
            del p["url"]
        elif how == "empty-url":
            p["url"] = ""
        elif how == "empty-abstract":
            p["abstract"] = ""
        elif how == "empty-title":
            p["title"] = ""
        else:
            raise ValueError(how)


def generate(seed):
    rng = random.Random(seed)
    files = {}
    for topic in TOPICS:
        papers = make_topic(rng, topic, 1)
        files[topic["file"] + ".jsonl"] = papers
    break_records([p for papers in files.values() for p in papers])
    out = {}
    for name, papers in files.items():
        lines = [json.dumps(p, ensure_ascii=False, separators=(", ", ": ")) for p in papers]
        out[name] = "\n".join(lines) + "\n"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    files = generate(args.seed)
    out = os.path.normpath(args.out)
    if args.check:
        stale = []
        for name, text in sorted(files.items()):
            path = os.path.join(out, name)
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(name)
            except FileNotFoundError:
                stale.append(name)
        if stale:
            print(f"corpus in {out} is stale: {', '.join(stale)}; run scripts/generate-corpus.py", file=sys.stderr)
            return 1
        print(f"corpus in {out} is up to date", file=sys.stderr)
        return 0
    os.makedirs(out, exist_ok=True)
    total = 0
    for name, text in sorted(files.items()):
        with open(os.path.join(out, name), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        total += text.count("\n")
    print(f"wrote {total} papers in {len(files)} files to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
