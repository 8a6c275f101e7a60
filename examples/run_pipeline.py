"""Profile a small GPT, schedule it over two CPU ranks, run the schedule and compare.

The same steps as the command line::

    layersched profile examples/models.py:gpt_small --microbatch 4 --out gpt_small.yaml
    layersched solve gpt_small.yaml --schedule 1f1b-split --out schedule.json
    python -m layersched.run schedule.json --model examples/models.py:gpt_small --steps 10 \\
        --trace run-trace.json
    layersched compare schedule.json run-trace.json

Run it with ``python examples/run_pipeline.py``; open ``run-trace.chrome.json`` in
https://ui.perfetto.dev to see the measured and the predicted timeline side by side.
"""

from pathlib import Path

from layersched.describe.stages import pipeline_from_spec
from layersched.formats.export import save_json, schedule_file
from layersched.runtime.launch import launch_local
from layersched.runtime.profiler import problem_from_profile, profile
from layersched.runtime.trace import compare
from layersched.schedule.solve import solve_pipeline

MODEL = f"{Path(__file__).parent / 'models.py'}:gpt_small"

if __name__ == "__main__":  # each rank is a new process, which imports this file
    prof = profile(MODEL, microbatch=4, num_microbatches=8)
    spec = problem_from_profile(prof, microbatches=8, pipeline=2)
    solution = solve_pipeline(pipeline_from_spec(spec), schedule="1f1b-split")
    doc = schedule_file(solution)
    save_json(doc, "schedule.json")
    results = launch_local(doc, MODEL, steps=10, model_options={"microbatch_size": 4}, trace="run-trace.json")
    print("losses:", [round(x, 4) for x in next(r.losses for r in results if r.losses)])
    print(compare(doc, "run-trace.json").to_text())
