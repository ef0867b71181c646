"""Stand-in for nanoGPT's train.py."""
import standin

if __name__ == "__main__":
    standin.run("train.py")
