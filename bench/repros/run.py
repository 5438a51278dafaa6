"""Run the fuzzing helper's repros (this folder) against a tree and record what they print.

    python bench/repros/run.py [--root TREE] [--out NAME] [--label TEXT] [--only NAME,...]

Each script prints the budget, prediction and measurement of the case it reproduces (or the error).
``--root``: the tree whose ``torch_exec`` and ``gpusolve`` they import (default: this repository);
``--label`` names it in the record. Writes bench/results/<NAME>.md (default ``repros_cpu``).
"""
from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import cpu_description  # noqa: E402

SCRIPTS = ("grad_hooks", "autograd_grad_measured", "returned_input", "measure_before_first_call", "tuple_fp16",
           "cat_slice", "googlenet_aux", "paper_kept_past_hooks", "model_state_changes", "frozen_probe",
           "autocast_export_grads",
           # the third session's reviews (2026-11-27): joins, offloading on the CPU, training loops
           "rv_join_backward_inputs", "rv_join_frozen_towers", "rv_join_plain_least", "rv_join_report_grads",
           "rv_offload_first_step", "rv_loop_stale_graph", "rv_loop_tensor_hook_in_forward",
           "rv_loop_buffer_read_recompute", "rv_loop_dtype_after_wrap", "rv_loop_compile_wrapper",
           "rv_loop_forward_signature", "rv_loop_seq_state_dict",
           # the fourth session (2026-11-27, evening)
           "user_profiler", "rv_offload_compare_min", "rv_offload_paper_runner_inputs", "rv_user_python_random",
           "rv_user_aux_attribute", "rv_user_inplace_input", "rv_user_own_error", "rv_user_shared_accumulation",
           # the fifth session (2026-11-27, night): training loops, the command line
           "rv5_user_tuple_aux", "rv5_user_nested_aux", "rv5_train_two_forwards_side",
           "rv5_train_side_held_between_steps", "rv5_train_wrap_ddp", "rv5_train_ddp_static_blocks",
           "rv5_cli_curve_not_optimal", "rv5_cli_curve_at_minimum", "rv5_cli_out_dirs_left",
           "rv5_cli_chain_file_traceback", "rv5_cli_lenient_profile", "rv5_cli_profile_warning_dropped",
           "rv5_cli_thesis_memory", "rv5_cli_bucket_negative_msg", "rv5_cli_python_m", "rv5_cli_train_tvdensenet",
           "rv5_diff_solve_budgets_notes", "rv5_diff_underscore_aux_list",
           "rv5_manual_replan_mid_step", "rv5_join_replan_in_flight", "rv5_offload_learned_replan_in_flight",
           "rv5_manual_profile_other_shapes", "rv5_manual_profile_argument_types", "rv5_manual_late_argument_errors",
           "rv5_manual_plan_after_budget_none", "rv5_offload_paper_runner_dropped_step_leak",
           # left open by the fifth session, fixed by the sixth
           "rv5_manual_nested_profiler_leak", "rv5_manual_failed_prepare_discards_profile",
           # the sixth session (2026-11-28): offloading, the README and the command line, training loops
           "rv6_offload_curve_not_solve", "rv6_offload_latency_greek_mu", "rv6_offload_tau_overflow",
           "rv6_docs_demo_backend_exact", "rv6_docs_curve_above_solve_at_minimum", "rv6_docs_small_profile_gib_axis",
           "rv6_docs_join_compare_hides_store_all", "rv6_docs_cli_fractional_budget",
           "rv6_docs_cli_percent_budget_infeasible_msg", "rv6_docs_cli_note_twice", "rv6_docs_curve_silent_after_done",
           "rv6_docs_train_backend_cuda_traceback",
           "rv6_train_frozen_param_state", "rv6_train_tied_optimizer_in_backward", "rv6_train_ddp_shared_leaf",
           "rv6_train_blocks_forward_hook_features", "rv6_train_blocks_check_state_update",
           "rv6_train_functional_call",
           # the sixth session's review of its own diff, and of the manual route and the join CLI
           "rv6_diff_compare_percent_hint", "rv6_diff_executor_doc_spliced", "rv6_diff_float32_fraction_budget",
           "rv6_diff_link_range_sum", "rv6_diff_nested_wrapper_auto_probe", "rv6_diff_offload_curve_user_bucket",
           "rv6_diff_param_write_via_data", "rv6_diff_percent_hint_above_100", "rv6_diff_percent_hint_rounding",
           "rv6_diff_train_fraction_budget", "rv6_join_cli_paper_options_ignored",
           "rv6_join_shared_grads_read_as_activations", "rv6_manual_profile_other_widths",
           "rv6_manual_tuple_nograd_member_grad",
           # open (not fixed): exits nonzero
           "rv6_diff_hooks_param_read_outside",
           # the seventh session's (2026-11-28): session 6's open lead, and gradient hooks on a tied weight
           "rv6_manual_tuple_passthrough_over_budget", "rv7_train_tied_grad_hook_clamp",
           "rv7_train_own_generator", "rv7_train_autograd_grad_budget", "rv7_train_two_forwards_unmeasured",
           "rv7_train_seq_unsaved_boundaries", "rv7_diff_hook_kept_grad_is_dot_grad", "rv7_diff_two_calls_grad_hook",
           "rv7_offload_dropped_step_pool", "rv7_offload_auto_replan_new_signature",
           "rv7_offload_join_replan_typeerror", "rv7_rev_generator_in_container", "rv7_rev_calls_other_signature",
           "rv7_rev_hooked_refusal_val_alive",
           # the eighth session (2026-11-28): two groupings of unsaved boundaries
           "rv8_seq_unsaved_groupings_fidelity", "rv8_rg_percent_ceiling_over_fitting_face",
           "rv8_rg_learned_holds_lost_in_flight", "rv8_rg_isolated_percent_of_overcount",
           "rv8_rg_schedule_fn_regrouped_chain", "rv8_rg_tied_param_refused_regrouped",
           # the ninth session (2026-11-28)
           "rv9_off_new_signature_in_flight", "rv9_train_parametrize_cached_capture",
           "rv9_train_parametrize_cached_nograd_runs", "rv9_hooks_optimizer_in_backward_peak",
           "rv9_hooks_unused_two_calls_post_hook", "rv9_hooks_ddp_find_unused", "rv9_hooks_accumulator_node_tied",
           "rv9_join_refused_replan_keeps_new_recompute_flags", "rv9_join_thesis_store_all_below_minimum",
           # the tenth session (2026-11-28): the solver, offloading, the any-model route
           "rv10_solver_thesis_compare_outside_class", "rv10_solver_thesis_curve_default_top",
           "rv10_solver_chain_file_float_input_grad", "rv10_solver_zero_budget_note_sizes",
           "rv10_offload_mode_switch_before_backward", "rv10_offload_compare_recompute_only_flag",
           "rv10_auto_infeasible_hint_wrap_again", "rv10_auto_blocks_rest_grads_as_activations",
           "rv10_auto_llama_bwd_over_budget", "rv10_diff_join_compare_thesis_store_all",
           "rv10_diff_offload_compare_thesis_paper_rows", "rv10_diff_sequential_repeated_module",
           "rv10_diff_perf_mode_walk_callable_stages",
           "rv10_hf_wav2vec2_blocks_meter_unseen_frees",  # left open by the tenth session, fixed by the eleventh
           # open (not fixed): exits nonzero (a hook put on the accumulator node by hand is out of sight: it runs per
           # part)
           "rv10_diff_hooks_node_hand_hook_beside_api",
           # the eleventh session (2026-11-28): transformers, torchvision, the README walk-through
           "rv11_hf_wav2vec2_layerdrop_wrong_cause", "rv11_tv_plain_step_meter_first_output",
           "rv11_tv_qat_fused_fakequant_recompute", "rv11_tv_qat_observer_resize", "rv11_docs_plain_plan_to_dict",
           "rv11_docs_chain_file_fraction_unnamed", "rv11_docs_chain_file_length_blames_other_field",
           "rv11_docs_offload_hint_other_command", "rv11_docs_budget_bits_unit_read_as_bytes",
           "rv11_docs_thesis_differs_exit_zero",
           # the eleventh session's review of its own diff
           "rv11_diff_plain_step_meter_ends_at_first_backward", "rv11_diff_blocks_opened_meter_left_running",
           "rv11_diff_sparse_buffer_profile_raises", "rv11_diff_buffer_copy_profiling_memory",
           "rv11_diff_plain_plan_least_below_wrappers", "rv11_diff_offload_example_drops_h2d",
           "rv11_diff_chain_file_empty_t_fwd", "rv11_diff_layerdrop_drawn_before_blocks",
           # open (not fixed): exits nonzero (encoder-decoders' tuple boundaries over-counted: budget held, loose;
           # improved storage by storage, the rest needs a DP rule)
           "rv11_hf_encdec_tuple_state_overcount",
           # the twelfth session (2026-11-28, evening)
           "rv12_offload_rounded_out_auto_bucket", "rv12_join_shared_input_inplace_first_stage",
           "rv12_offload_namedtuple_state", "rv12_train_caller_loss_over_budget",
           "rv12_hf_moe_inplace_write_into_side_value", "rv12_hf_kv_cache_blocks_backward_twice",
           "rv12_hf_gptj_output_held_by_error_cycle", "rv12_hf_output_hooks_capture_twice",
           # the twelfth session's review of its own diff
           "rv12_diff_caller_turn_blamed_for_chain_excess", "rv12_diff_join_view_first_stage_refused",
           "rv12_diff_join_warning_claims_caller_turn_counted",
           # the twelfth session's review of the GPU session's scripts (CPU stand-ins)
           "rv12_gpu_executor_failed_network_exit_zero", "rv12_gpu_offload_executor_failed_network_exit_zero",
           "rv12_gpu_fidelity_one_model_loses_all_rows",
           # the twelfth session's second transformers review
           "rv12b_hf_layerdrop_rest_over_budget", "rv12b_hf_recorder_hooks_blamed_on_user",
           # the twelfth session's second review of its own diff
           "rv12c_diff_join_view_then_inplace_unrefused", "rv12c_diff_caller_turn_cpu_host_buffers",
           "rv12c_diff_fsdp_blocks_blamed_on_transformers", "rv12c_diff_layerdrop_beside_higher_ranked_list",
           # the nineteenth session (2026-11-29): a review of sessions 17-18's diff, of the join and offload executors,
           # of its own diff (rv19b), a researcher's checks against independent truth (rv19c)
           "rv19_diff_callable_stage_frozen_no_grad", "rv19_diff_join_frozen_no_grad",
           "rv19_join_head_remainder_draw_order", "rv19_join_branch_unsaved_boundaries_merged",
           "rv19_join_head_inplace_refusal_after_step", "rv19b_join_face_choice_ignores_draw_order",
           "rv19b_join_head_inplace_refused_when_plain_runs", "rv19b_join_kept_face_percent_of_overcount",
           "rv19b_docs_auto_last_profile_prepare_profile", "rv19c_simulate_frees_input_of_live_tape",
           "rv19e_join_order_warning_unshared_buffers", "rv19e_join_refused_replan_warns_order",
           # the nineteenth session's breadth review of transformers' architectures (36 more; see its closing note)
           "rv19d_hf_mobilebert_grad_view_storage_over_budget", "rv19d_hf_wav2vec2_first_call_learned_excess",
           "rv19d_hf_floor_error_names_wrong_least",
           # open (not fixed), exit 1: a merged stage's drops read off one call (Note [Drops seen on one call]); the
           # solvers' class of schedules (docs/cost-model.md, "The class of schedules")
           "rv19_diff_fused_member_drop_data_dependent", "rv19c_exact_misses_nonpersistent_schedule",
           # the twentieth session (2026-11-29): unusual user models (rv20a), the wrappers in training loops (rv20b),
           # the solvers' metamorphic properties (rv20c)
           "rv20a_blocks_reentrant_checkpoint_wrong_grads", "rv20a_auto_retain_grad_in_forward_dropped",
           "rv20a_auto_item_output_indexerror", "rv20a_auto_vmap_region_cut", "rv20a_auto_tensor_attribute_fixed_in_graph",
           "rv20a_first_call_profiling_writes_buffer_ema", "rv20a_seq_dict_state_grads_dropped",
           "rv20a_seq_stage_counter_attribute_rerun", "rv20a_plain_budget_caller_turn_never_learned",
           "rv20a_blocks_dict_output_typeerror", "rv20a_blocks_scripted_blocks_hook_error",
           "rv20a_auto_forward_counter_attribute_frozen", "rv20a_auto_torch_manual_seed_in_forward",
           "rv20a_auto_torch_cond_refused_wrong_cause",
           "rv20b_auto_pickle_load_writes_buffers", "rv20b_auto_removed_backward_hook_keeps_fallback",
           "rv20b_dropout_enabled_after_profile_not_replayed", "rv20b_param_written_before_backward_unchecked",
           "rv20b_seq_replaced_stage_still_runs_old", "rv20b_pending_step_record_breaks_save",
           # the review of the session's own change (rv20r)
           "rv20r_seq_loop_scalar_reprofiles_every_step", "rv20r_seq_copied_wrapper_reprofiles",
           "rv20r_seq_constant_mask_in_nested_state_refused", "rv20r_seq_logged_attribute_with_dropout_refused",
           "rv20r_auto_counter_block_fallback_refused", "rv20r_seq_counter_in_extra_module_not_refused",
           "rv20r_seq_replaced_stage_with_extras_not_followed",
           "rv20c_least_peak_fallback_only_when_table_empty", "rv20c_join_least_peak_fallback_only_when_table_empty",
           # open, exit 1: grad-mode branches under a plan (docs/pytorch.md); a tensor attribute replaced at every
           # step is captured again at every step (warned each time). rv20a_caller_turn_learns_excess_not_shortfall:
           # fixed in session 22 (the loss's backward counted at the caller's turn, whole, from the first step over)
           "rv20a_caller_turn_learns_excess_not_shortfall", "rv20a_seq_nograd_forward_takes_inference_path",
           "rv20r_auto_tensor_attribute_set_each_step_reexports",
           # session 21 (2026-11-29): randomness review (rv21d_seq_entropy_seeded_generator_recomputed left open, exit 1:
           # a generator seeded from the OS in forward cannot be replayed and is not refused; docs/pytorch.md says so)
           "rv21d_auto_own_generator_seeded_in_forward", "rv21d_seq_data_dependent_draw_not_replayed",
           "rv21d_seq_global_generator_unseen", "rv21d_seq_generator_in_plain_object_unseen",
           "rv21d_seq_python_numpy_random_not_refused", "rv21d_blocks_unseen_generator_refused_wrong_cause",
           "rv21d_auto_generator_argument_unseen", "rv21d_generator_replaced_between_steps",
           "rv21d_seq_every_generator_recorded_per_stage", "rv21d_auto_lazy_module_init_draws",
           "rv21d_seq_drop_rate_attribute_from_zero_not_replayed", "rv21d_seq_entropy_seeded_generator_recomputed",
           "rv21d_join_live_stage_draws_not_replayed", "rv21d_auto_python_random_on_later_call_unrefused",
           "rv21d_hook_closure_generator_unseen",
           # session 21 (2026-11-29): stages whose sizes follow the data
           "rv21a_rows_selected_by_mask_over_budget",
           # session 21 (2026-11-29): review of the session's change (left open then, fixed in session 22: a generator
           # replaced inside a list; an unused lazy module under auto_checkpoint; a new generator at every step
           # re-profiles every step. Still open, exit 1: a schedule-based torch.profiler across measured CPU steps,
           # Note [One profiler per thread] in torch_exec/meter.py)
           "rv21r_seq_moe_routing_refused", "rv21r_seq_constant_bool_mask_refused",
           "rv21r_seq_generator_in_list_replaced_unseen", "rv21r_seq_bincount_minlength_refused",
           "rv21r_auto_unused_lazy_module_fails", "rv21r_meter_acc_events_parse_cost",
           "rv21r_seq_new_generator_each_step_reprofiles", "rv21r_meter_schedule_profiler_across_measured_step",
           # session 22 (2026-11-30): review of size reuse (Note [Sizes that vary between calls]), all fixed the same
           # day (the size-dependent stage: one measured step over, then profiled, as the Note says)
           "rv22_seq_size_branch_over_budget", "rv22_auto_join_sibling_sizes_key_error",
           "rv22_seq_last_profile_covered_refused",
           # session 22 (2026-11-30): review of the session's change (generators, lazy modules, the caller's turn), both
           # fixed the same day
           "rv22b_auto_blocks_new_generator_each_step_reprofiles", "rv22b_auto_lazy_eval_head_prepare_refused",
           # session 22 (2026-11-30): transformers with batches of varying length (both fixed the same day)
           "rv22c_hf_blocks_covered_step_unmeasured", "rv22c_hf_encdec_export_never_covered")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(ROOT))
    parser.add_argument("--out", default="repros_cpu")
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--only", help="comma list of the scripts to run (default: all)")
    args = parser.parse_args(argv)
    import torch
    lines = [f"# The fuzzing helper's repros on {args.label} (CPU)", "",
             f"- device: CPU: {cpu_description()}", f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat()}",
             f"- command: `python bench/repros/run.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
             f"- torch {torch.__version__}; tree: {args.label}", ""]
    names = SCRIPTS if args.only is None else args.only.split(",")
    unknown = sorted(set(names) - set(SCRIPTS))
    if unknown:
        parser.error(f"--only: no repro {', '.join(unknown)}; they are {', '.join(SCRIPTS)}")
    for name in names:
        res = subprocess.run([sys.executable, str(HERE / f"{name}.py")], capture_output=True, text=True,
                             env=dict(os.environ, GS_ROOT=args.root), timeout=600)
        out = [line for line in (res.stdout + res.stderr).splitlines()
               if line.strip() and not line.startswith(("USDT", "[W"))]
        lines += [f"## {name}.py (exit {res.returncode})", "", "```", *out[-12:], "```", ""]
        print(name, res.returncode, flush=True)
    (ROOT / "bench" / "results" / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
