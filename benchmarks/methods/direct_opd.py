"""Direct-OPD (arXiv 2607.05394): carry an RL gain from a teacher to a student of another seed with
no verifier, by the per-token implicit reward log pi_teacher - log pi_teacher_ref on the
student's own samples.

On the default task: teacher_ref is a warm start, the teacher is it after --teacher-steps of
GRPO, the student is another seed's warm start (another initialisation and data order). Student
arms, same budget: `direct_opd` (teacher minus teacher_ref; the verifier's weight 0, so no
reward reaches the update but the implicit one), `distill` (on-policy distillation: teacher
minus the student's own logprobs, also without the verifier), each credited as GRPO credits a
reply's summed reward or `_per_token` (each token's own implicit reward: reinforce_pp at gamma
0), both also `_kl` (a KL penalty to the student's start, coefficient 0.1); `_top_k` (the
Rao-Blackwellised estimator: each position's implicit reward in expectation over the student's 8
likeliest tokens, a loss term), with `_sign_kl_pos` / `_sign_kl_neg` (KL 0.1 to the start only
on steps whose batch implicit reward is at or above 0 / below 0); and `grpo` (the verifier's
reward, for scale). The verifier still scores every run's accuracy.

Prints one JSON object: the teacher's and the student's starting accuracy, per arm held-out greedy
accuracy along the run, the mean per-sequence implicit reward, wall seconds; with the CPU, date
and versions.

Seed s (--seeds) redraws all three models: teacher_ref is the warm start of train.seed 2s (the
teacher is it after GRPO with that seed), the student the warm start of 2s + 1.

    python benchmarks/methods/direct_opd.py [--steps 30] [--teacher-steps 30] [--eval-every 10]
        [--seeds 0 1 2] [--arms distill direct_opd_top_k ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rlvr.config import load_config
from rlvr.train.components import build_components
from rlvr.train.warmstart import ensure_warm_start

from runs import report, train_arm

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "arithmetic.toml"
NO_VERIFIER = "task.rewards={numeric: 0.0}"  # scored (accuracy, eval) but worth nothing
# Each token's own implicit reward as its advantage (whitened over the batch), as OPD credits it,
# instead of GRPO's group-normalised sum over the reply.
PER_TOKEN = ["algo.advantage=reinforce_pp", "algo.gamma=0.0"]
KL = "algo.kl_coef=0.1"  # k3 to the student's own start, in the loss
TOP_K = "methods.direct_opd.top_k=8"
# the KL coefficient keyed on the sign of the batch's implicit reward: [below 0, at or above 0]
SIGN_KL_POS = "methods.direct_opd.kl_coefs=[0.0, 0.1]"
SIGN_KL_NEG = "methods.direct_opd.kl_coefs=[0.1, 0.0]"


def warm_start_of(seed: int) -> str:
    cfg = load_config(RECIPE, [f"train.seed={seed}"])
    return str(ensure_warm_start(cfg, build_components(cfg).task))


def arms_of(teacher: str, teacher_ref: str) -> dict[str, list[str]]:
    opd = "methods.direct_opd"
    shift = [NO_VERIFIER, f"{opd}.teacher={teacher}", f"{opd}.teacher_ref={teacher_ref}"]
    distill = [NO_VERIFIER, f"{opd}.teacher={teacher}"]
    return {
        "direct_opd": shift,
        "direct_opd_per_token": [*shift, *PER_TOKEN],
        "direct_opd_kl": [*shift, KL],
        "direct_opd_per_token_kl": [*shift, *PER_TOKEN, KL],
        "direct_opd_top_k": [*shift, TOP_K],
        "direct_opd_top_k_sign_kl_pos": [*shift, TOP_K, SIGN_KL_POS],
        "direct_opd_top_k_sign_kl_neg": [*shift, TOP_K, SIGN_KL_NEG],
        "direct_opd_sign_kl_neg": [*shift, *PER_TOKEN, SIGN_KL_NEG],
        "distill": distill,
        "distill_per_token": [*distill, *PER_TOKEN],
        "distill_top_k": [*distill, TOP_K],
        "grpo": [],
    }


def run_seed(seed: int, args, run_dir: str) -> dict:
    """Seed s: teacher_ref is the warm start of train.seed 2s, the student that of 2s + 1."""
    teacher_seed, student_seed = 2 * seed, 2 * seed + 1
    teacher_ref, student = warm_start_of(teacher_seed), warm_start_of(student_seed)
    trained = train_arm(RECIPE, [
        f"model.name={teacher_ref}", f"train.steps={args.teacher_steps}",
        f"train.seed={teacher_seed}",
    ], run_dir, f"teacher-{seed}")  # fmt: skip
    teacher = str(trained.trainer.run_dir.final)
    results = {"teacher_accuracy": {"base": trained.summary["base_eval"]["eval/accuracy"],
                                    "final": trained.summary["final_eval"]["eval/accuracy"]}}  # fmt: skip
    for name, keys in arms_of(teacher, teacher_ref).items():
        if args.arms and name not in args.arms:
            continue
        arm = train_arm(RECIPE, [
            f"model.name={student}", *keys, f"train.steps={args.steps}",
            f"train.eval_every={args.eval_every}", f"train.seed={student_seed}",
        ], run_dir, f"{name}-{seed}")  # fmt: skip
        results[name] = {
            "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
            "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
            "final_response_length": arm.summary["final_eval"]["eval/response_length"],
            "mean_train_reward": arm.mean("reward"),
            "mean_train_accuracy": arm.mean("accuracy"),
            "mean_sequence_implicit_reward": arm.mean("teacher/sequence_reward"),
            "mean_kl_coef": arm.mean("kl_coef"),
            "wall_seconds": arm.wall_seconds,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--teacher-steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--arms", nargs="*", help="run only these arms (default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        seeds = {f"seed {seed}": run_seed(seed, args, run_dir) for seed in args.seeds}
    report(
        "direct_opd", RECIPE, seeds, task="arithmetic (default)", steps=args.steps,
        teacher_steps=args.teacher_steps,
    )  # fmt: skip


if __name__ == "__main__":
    main()
