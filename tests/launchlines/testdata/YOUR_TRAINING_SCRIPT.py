"""Stand-in for the training script of torchrun's usage examples."""
import standin

if __name__ == "__main__":
    standin.run("YOUR_TRAINING_SCRIPT.py")
