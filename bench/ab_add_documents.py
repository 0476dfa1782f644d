"""A/B of the write path's cost: Retriever.add_documents, BM25 only, chunk_size=None, N short
documents with three metadata fields, in batches of 1,000. Prints microseconds of CPU per
document. Run it under callgrind for instruction counts that a busy machine does not move:

    valgrind --tool=callgrind python bench/ab_add_documents.py PYTHON_DIR N

with PYTHON_DIR the ``python`` folder of each checkout, N = 0 and N = 20000; the difference of
the two totals over 20,000 is the count per document (bench/pipeline.md).
"""

import sys
import time

sys.path.insert(0, sys.argv[1])
import ragfind  # noqa: E402

n = int(sys.argv[2])
docs = [
    {
        "id": f"d{i}",
        "title": "t",
        "text": f"word{i % 977} other text w{i % 31} here number {i}",
        "metadata": {"tenant": i % 100, "lang": "en", "score": i * 0.5},
    }
    for i in range(n)
]
r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False)
t = time.process_time()
for s in range(0, len(docs), 1000):
    r.add_documents(docs[s : s + 1000])
print(round((time.process_time() - t) / max(len(docs), 1) * 1e6, 2))
